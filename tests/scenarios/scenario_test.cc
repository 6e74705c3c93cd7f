// scenarios/scenario: the example scenarios load; defaults are filled in; each kind of
// mistake (syntax, unknown field or enum value, unknown names, values out of range,
// inconsistent cluster, optimizer parameters) gives "file:line:col: field: message".
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "scenarios/scenario.h"

namespace troupe::scenarios {
namespace {

// The message of the error parsing `text` as "s.pbtxt" (fails the test when it parses).
std::string error_of(const std::string& text) {
  auto s = parse_scenario(text, "s.pbtxt");
  if (s.ok()) FAIL("parsed without error:\n" << text);
  CHECK(s.error().error_code() == code::invalid_argument);
  return s.error().message();
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string k_minimal = "training { steps: 10 }\n";

}  // namespace

TEST_CASE("The example scenarios load", "[scenario]") {
  for (const char* name : {"default", "lenet", "mlp_local", "faults", "backups", "real", "simulated", "sim_scale"}) {
    INFO(name);
    std::string path = examples_dir() + "/" + name + ".pbtxt";
    auto s = load_scenario(path);
    if (!s.ok()) FAIL(s.error().to_string());
    CHECK(s->name() == name);
    CHECK(s->training().steps() > 0);
    CHECK(s->training().has_seed());
    // Each expects an accuracy, but for the shape-only one, which computes none.
    const bool shape_only = s->simulation().has_execute_kernels() && !s->simulation().execute_kernels();
    CHECK(s->report().expect().has_min_test_accuracy() == !shape_only);
    CHECK(check_dataset_files(s->dataset()).ok());
    // What a run prints parses back to the same scenario.
    auto again = parse_scenario(scenario_to_text(*s), path);
    REQUIRE(again.ok());
    CHECK(again->SerializeAsString() == s->SerializeAsString());
  }
  auto d = load_scenario(examples_dir() + "/default.pbtxt");
  REQUIRE(d.ok());
  CHECK(d->cluster().mode() == scenario::Cluster::IN_PROCESS);
  CHECK(num_tasks(d->cluster(), "worker") == 2);
  CHECK(num_tasks(d->cluster(), "ps") == 1);
  CHECK(num_tasks(d->cluster(), "chief") == 0);
  CHECK(d->training().replication() == scenario::Training::ASYNC);
  CHECK(d->training().seed() == 20160101);
  auto lenet = load_scenario(examples_dir() + "/lenet.pbtxt");
  REQUIRE(lenet.ok());
  CHECK(lenet->training().replication() == scenario::Training::SYNC);
  CHECK(lenet->training().backup_workers() == 0);
  auto local = load_scenario(examples_dir() + "/mlp_local.pbtxt");
  REQUIRE(local.ok());
  CHECK(local->cluster().mode() == scenario::Cluster::LOCAL);
  CHECK(local->cluster().job_size() == 1);
  CHECK(local->cluster().job(0).name() == "worker");
}

TEST_CASE("Defaults are filled in", "[scenario]") {
  auto s = parse_scenario(k_minimal, "dir/my_run.pbtxt");
  REQUIRE(s.ok());
  CHECK(s->name() == "my_run");
  CHECK(s->cluster().mode() == scenario::Cluster::LOCAL);
  REQUIRE(s->cluster().job_size() == 1);
  CHECK(s->cluster().job(0).name() == "worker");
  CHECK(s->cluster().job(0).tasks() == 1);
  CHECK(s->cluster().worker_job() == "worker");
  CHECK(s->cluster().has_ps_job());
  CHECK(s->cluster().ps_job().empty());
  CHECK(s->model().name() == "mlp");
  CHECK(s->model().hidden_units_size() == 2);
  CHECK(s->model().hidden_units(0) == 512);
  CHECK(s->dataset().name() == "fashion-mnist");
  CHECK(s->dataset().dir() == "/usr/share/datasets/fashion-mnist");
  CHECK(s->dataset().shuffle());
  CHECK(s->dataset().reader_threads() == 1);
  CHECK(s->dataset().min_after_dequeue() == 4 * 64);
  CHECK(s->dataset().queue_capacity() == 4 * 64 + 3 * 64);
  CHECK(s->training().optimizer().name() == "sgd");
  CHECK(s->training().optimizer().learning_rate() == Approx(0.01));
  CHECK_FALSE(s->training().optimizer().has_momentum());  // sgd has none
  CHECK(s->training().batch_size() == 64);
  CHECK(s->training().has_seed());
  CHECK(s->training().replication() == scenario::Training::ASYNC);
  CHECK_FALSE(s->training().has_backup_workers());
  CHECK(s->report().progress() == scenario::Report::AUTO);
  CHECK(s->report().progress_every() == 100);

  auto adam = parse_scenario("training { steps: 1 optimizer { name: 'adam' } }", "a.pbtxt");
  REQUIRE(adam.ok());
  CHECK(adam->training().optimizer().learning_rate() == Approx(0.001));
  CHECK(adam->training().optimizer().beta1() == Approx(0.9));
  CHECK(adam->training().optimizer().beta2() == Approx(0.999));
  CHECK(adam->training().optimizer().epsilon() == Approx(1e-8));
  auto rmsprop = parse_scenario("training { steps: 1 optimizer { name: 'rmsprop' } }", "r.pbtxt");
  REQUIRE(rmsprop.ok());
  CHECK(rmsprop->training().optimizer().has_momentum());
  CHECK(rmsprop->training().optimizer().momentum() == 0);
  CHECK(rmsprop->training().optimizer().decay() == Approx(0.9));

  // Two jobs: IN_PROCESS, variables on "ps" when there is such a job.
  auto cluster = parse_scenario("cluster { job { name: 'ps' } job { name: 'worker' tasks: 3 } }\n" +
                                    k_minimal,
                                "c.pbtxt");
  REQUIRE(cluster.ok());
  CHECK(cluster->cluster().mode() == scenario::Cluster::IN_PROCESS);
  CHECK(cluster->cluster().ps_job() == "ps");
  CHECK(num_tasks(cluster->cluster(), "worker") == 3);

  // Without shuffling nothing is kept back in the queue.
  auto unshuffled = parse_scenario("dataset { shuffle: false }\n" + k_minimal, "u.pbtxt");
  REQUIRE(unshuffled.ok());
  CHECK(unshuffled->dataset().min_after_dequeue() == 0);
  CHECK(unshuffled->dataset().queue_capacity() == 3 * 64);
  // Nor in the first-in first-out queue of a deterministic order.
  auto ordered = parse_scenario("dataset { deterministic: true }\n" + k_minimal, "d.pbtxt");
  REQUIRE(ordered.ok());
  CHECK(ordered->dataset().shuffle());
  CHECK(ordered->dataset().min_after_dequeue() == 0);
  CHECK(ordered->dataset().queue_capacity() == 3 * 64);
  CHECK_FALSE(s->dataset().deterministic());

  // A seed drawn at load time differs between loads; a written one is kept.
  auto a = parse_scenario(k_minimal, "s.pbtxt");
  auto b = parse_scenario(k_minimal, "s.pbtxt");
  REQUIRE((a.ok() && b.ok()));
  CHECK(a->training().seed() != b->training().seed());
  auto zero = parse_scenario("training { steps: 1 seed: 0 }", "s.pbtxt");
  REQUIRE(zero.ok());
  CHECK(zero->training().seed() == 0);
}

TEST_CASE("Syntax errors and unknown fields give file:line:col", "[scenario]") {
  std::string missing_brace = "training {\n  steps: 10\n";
  CHECK(starts_with(error_of(missing_brace), "s.pbtxt:3:1: "));

  std::string bad_value = "training {\n  steps: ten\n}\n";
  std::string e = error_of(bad_value);
  CHECK(starts_with(e, "s.pbtxt:2:10: "));
  CHECK(contains(e, "integer"));

  std::string unknown_field = "training {\n  stepz: 10\n}\n";
  e = error_of(unknown_field);
  CHECK(starts_with(e, "s.pbtxt:2:3: "));
  CHECK(contains(e, "has no field named \"stepz\""));
  CHECK(contains(e, "(did you mean 'steps'?)"));
  CHECK(contains(e, "Fields of Training: optimizer, steps, batch_size"));

  // Columns count a tab as advancing to the next multiple of 8, as protobuf does.
  e = error_of("training {\n\tstepz: 10\n}\n");
  CHECK(starts_with(e, "s.pbtxt:2:9: "));
  CHECK(error_of("training {\n\tsteps: 10\n\tbatch_size: 0\n}\n") ==
        "s.pbtxt:3:9: training.batch_size: must be >= 1 (is 0)");

  std::string unknown_top = "trainig { steps: 10 }\n";
  e = error_of(unknown_top);
  CHECK(starts_with(e, "s.pbtxt:1:1: "));
  CHECK(contains(e, "(did you mean 'training'?)"));

  std::string unknown_enum = "cluster { mode: SIMULATD }\n" + k_minimal;
  e = error_of(unknown_enum);
  CHECK(starts_with(e, "s.pbtxt:1:17: "));
  CHECK(contains(e, "SIMULATD"));
  CHECK(contains(e, "(did you mean 'SIMULATED'?) Valid: LOCAL, IN_PROCESS, SIMULATED, REAL."));

  std::string twice = "training {\n  steps: 10\n  steps: 20\n}\n";
  e = error_of(twice);
  CHECK(starts_with(e, "s.pbtxt:3:"));
  CHECK(contains(e, "steps"));

  auto missing = load_scenario("/no/such/scenario.pbtxt");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().error_code() == code::not_found);
  CHECK(contains(missing.error().message(), "/no/such/scenario.pbtxt"));
}

TEST_CASE("Unknown names list the valid ones, at the field's position", "[scenario]") {
  std::string e = error_of("model {\n  name: \"resnet\"\n}\n" + k_minimal);
  CHECK(e == "s.pbtxt:2:3: model.name: unknown model 'resnet' (valid: mlp, lenet)");

  e = error_of("dataset { name: 'mnist' }\n" + k_minimal);
  CHECK(e == "s.pbtxt:1:11: dataset.name: unknown dataset 'mnist' (valid: fashion-mnist)");

  e = error_of("training {\n  steps: 10\n  optimizer {\n    name: 'adamw'\n  }\n}\n");
  CHECK(e == "s.pbtxt:4:5: training.optimizer.name: unknown optimizer 'adamw' (did you mean "
             "'adam'?) (valid: sgd, momentum, adagrad, adam, rmsprop)");
}

TEST_CASE("Values out of range name the field and say what is valid", "[scenario]") {
  CHECK(error_of("training { steps: 0 }") ==
        "s.pbtxt:1:12: training.steps: must be >= 1 (is 0)");
  CHECK(error_of("training { steps: -5 }") ==
        "s.pbtxt:1:12: training.steps: must be >= 1 (is -5)");
  // A field left out is reported where its message is, or else with the file alone.
  CHECK(error_of("report { }\ntraining { batch_size: 8 }") ==
        "s.pbtxt:2:1: training.steps: required: how many updates to apply (for example: "
        "steps: 1000)");
  CHECK(error_of("") ==
        "s.pbtxt: training.steps: required: how many updates to apply (for example: steps: 1000)");
  CHECK(error_of("training {\n  steps: 10\n  batch_size: 0\n}") ==
        "s.pbtxt:3:3: training.batch_size: must be >= 1 (is 0)");
  CHECK(error_of("training { steps: 1 eval_every: -1 }") ==
        "s.pbtxt:1:21: training.eval_every: must be >= 0 (0: only at the end; is -1)");
  CHECK(error_of("model { hidden_units: [64, 0] }\n" + k_minimal) ==
        "s.pbtxt:1:9: model.hidden_units[1]: must be >= 1 (is 0)");
  CHECK(error_of("model { name: 'lenet' hidden_units: 10 }\n" + k_minimal) ==
        "s.pbtxt:1:23: model.hidden_units[0]: only the mlp model has hidden_units, not 'lenet'");
  CHECK(error_of("dataset { reader_threads: 0 }\n" + k_minimal) ==
        "s.pbtxt:1:11: dataset.reader_threads: must be >= 1 (is 0)");
  CHECK(error_of("dataset { shuffle: false min_after_dequeue: 10 }\n" + k_minimal) ==
        "s.pbtxt:1:26: dataset.min_after_dequeue: is 10 but the dataset is not shuffled "
        "(shuffle: false): it must be 0");
  CHECK(error_of("dataset { deterministic: true min_after_dequeue: 10 }\n" + k_minimal) ==
        "s.pbtxt:1:31: dataset.min_after_dequeue: is 10 but the queue is first-in first-out "
        "(deterministic: true): it must be 0");
  CHECK(error_of("dataset { deterministic: true reader_threads: 2 }\n" + k_minimal) ==
        "s.pbtxt:1:31: dataset.reader_threads: is 2 but deterministic: true needs 1 (several "
        "readers fill the queue in an order set by timing)");
  CHECK(error_of("dataset { queue_capacity: 32 }\n" + k_minimal) ==
        "s.pbtxt:1:11: dataset.queue_capacity: must be >= training.batch_size (64) and > "
        "min_after_dequeue (256); is 32");
  CHECK(error_of("report { progress_every: 0 }\n" + k_minimal) ==
        "s.pbtxt:1:10: report.progress_every: must be >= 1 (is 0)");
  CHECK(error_of("report {\n  expect { min_test_accuracy: 1.5 }\n}\n" + k_minimal) ==
        "s.pbtxt:2:12: report.expect.min_test_accuracy: must be in [0, 1] (is 1.5)");
  CHECK(error_of("report { expect { max_final_loss: 0 } }\n" + k_minimal) ==
        "s.pbtxt:1:19: report.expect.max_final_loss: must be > 0 (is 0)");
}

TEST_CASE("Impossible sizes and counts name the field and the largest value", "[scenario]") {
  // 2000000000 used to load, and its default min_after_dequeue (4 * batch_size) overflowed
  // into a negative value reported on an internal queue node.
  CHECK(error_of("training { steps: 1 batch_size: 2000000000 }") ==
        "s.pbtxt:1:21: training.batch_size: must be <= 65536 (is 2000000000)");
  CHECK(error_of("training {\n  steps: 10000000000000\n}") ==
        "s.pbtxt:2:3: training.steps: must be <= 1000000000000 (is 10000000000000)");
  CHECK(error_of("training { steps: 1 eval_every: 10000000000000 }") ==
        "s.pbtxt:1:21: training.eval_every: must be <= 1000000000000 (0: only at the end; is "
        "10000000000000)");
  CHECK(error_of("report { progress_every: 10000000000000 }\n" + k_minimal) ==
        "s.pbtxt:1:10: report.progress_every: must be <= 1000000000000 (is 10000000000000)");
  CHECK(error_of("dataset { min_after_dequeue: 2000000000 }\n" + k_minimal) ==
        "s.pbtxt:1:11: dataset.min_after_dequeue: must be <= 1048575 (is 2000000000)");
  CHECK(error_of("dataset { queue_capacity: 2000000000 }\n" + k_minimal) ==
        "s.pbtxt:1:11: dataset.queue_capacity: must be <= 1048576 (is 2000000000)");
  CHECK(error_of("dataset { reader_threads: 1000 }\n" + k_minimal) ==
        "s.pbtxt:1:11: dataset.reader_threads: must be <= 64 (is 1000)");
  CHECK(error_of("model { hidden_units: [64, 100000] }\n" + k_minimal) ==
        "s.pbtxt:1:9: model.hidden_units[1]: must be <= 16384 (is 100000)");
  std::string layers = "model { hidden_units: [1";
  for (int i = 1; i < 33; ++i) layers += ", 1";
  CHECK(error_of(layers + "] }\n" + k_minimal) ==
        "s.pbtxt:1:9: model.hidden_units[32]: at most 32 hidden layers (has 33)");
  // Task counts whose sum overflowed an int (undefined behaviour, found by UBSan).
  CHECK(error_of("cluster {\n  job { name: 'worker' tasks: 2147483647 }\n"
                 "  job { name: 'ps' tasks: 2147483647 }\n}\n" + k_minimal) ==
        "s.pbtxt:2:24: cluster.job[0].tasks: must be <= 1024 (is 2147483647)\n"
        "s.pbtxt:3:20: cluster.job[1].tasks: must be <= 1024 (is 2147483647)");
  CHECK(error_of("cluster {\n  job { name: 'worker' tasks: 1000 }\n"
                 "  job { name: 'ps' tasks: 1000 }\n}\n" + k_minimal) ==
        "s.pbtxt:2:3: cluster.job: the cluster has 2000 tasks in all; at most 1024");

  // The largest values load, and the defaults derived from them stay in range.
  auto largest = parse_scenario(
      "cluster { job { name: 'ps' tasks: 24 } job { name: 'worker' tasks: 1000 } }\n"
      "model { hidden_units: [16384] }\n"
      "dataset { reader_threads: 64 min_after_dequeue: 1048575 }\n"
      "training { steps: 1000000000000 batch_size: 65536 eval_every: 1000000000000 }\n"
      "report { progress_every: 1000000000000 }\n",
      "s.pbtxt");
  if (!largest.ok()) FAIL(largest.error().message());
  CHECK(largest->dataset().queue_capacity() == 1048576);  // the default, capped
  auto defaults = parse_scenario("training { steps: 1 batch_size: 65536 }", "s.pbtxt");
  REQUIRE(defaults.ok());
  CHECK(defaults->dataset().min_after_dequeue() == 4 * 65536);
  CHECK(defaults->dataset().queue_capacity() == 7 * 65536);
}

TEST_CASE("Very long names are errors, not a crash", "[scenario]") {
  // std::regex overflowed the stack on these (found by feeding the scenario fuzzer long
  // names; fuzz/regressions/scenario/ keeps both).
  std::string name(200000, 'A');
  std::string e = error_of("cluster { job { name: '" + name + "' } worker_job: '" + name + "' }\n" +
                           k_minimal);
  CHECK(starts_with(e, "s.pbtxt:1:17: cluster.job[0].name: 'AAAA"));
  CHECK(contains(e, "is not a valid job name"));
  e = error_of("training { steps: 1 " + std::string(200000, 'b') + ": 1 }");
  CHECK(starts_with(e, "s.pbtxt:1:21: Message type \"troupe.scenario.Training\" has no field named \"bbbb"));
  CHECK(contains(e, "Fields of Training: optimizer, steps"));
}

TEST_CASE("Optimizer parameters must belong to the optimizer and be in range", "[scenario]") {
  CHECK(error_of("training {\n  steps: 1\n  optimizer { name: 'sgd' momentum: 0.9 }\n}") ==
        "s.pbtxt:3:27: training.optimizer.momentum: 'sgd' has no parameter momentum (its "
        "parameters: learning_rate)");
  CHECK(error_of("training { steps: 1 optimizer { name: 'adam' beta1: 1.0 } }") ==
        "s.pbtxt:1:46: training.optimizer.beta1: must be in [0, 1) (is 1)");
  CHECK(error_of("training { steps: 1 optimizer { learning_rate: -0.1 } }") ==
        "s.pbtxt:1:33: training.optimizer.learning_rate: must be > 0 (is -0.1)");
  CHECK(error_of("training { steps: 1 optimizer { learning_rate: nan } }") ==
        "s.pbtxt:1:33: training.optimizer.learning_rate: must be > 0 (is nan)");
  CHECK(error_of("training { steps: 1 optimizer { name: 'adagrad' initial_accumulator_value: 0 } }") ==
        "s.pbtxt:1:49: training.optimizer.initial_accumulator_value: must be > 0 (is 0)");
  // Learning-rate decay belongs to every optimizer, and needs both of its numbers.
  auto decayed = parse_scenario(
      "training { steps: 1 optimizer { name: 'momentum' decay_steps: 100 decay_rate: 0.5 staircase: true } }", "s.pbtxt");
  REQUIRE(decayed.ok());
  CHECK(decayed->training().optimizer().decay_steps() == 100);
  CHECK(decayed->training().optimizer().decay_rate() == 0.5f);
  CHECK(decayed->training().optimizer().staircase());
  CHECK(error_of("training { steps: 1 optimizer { decay_steps: 100 } }") ==
        "s.pbtxt:1:33: training.optimizer.decay_steps: needs decay_rate: the learning rate is multiplied by it "
        "every decay_steps steps");
  CHECK(error_of("training { steps: 1 optimizer { decay_rate: 0.5 } }") ==
        "s.pbtxt:1:33: training.optimizer.decay_rate: needs decay_steps (learning-rate decay)");
  CHECK(error_of("training { steps: 1 optimizer { decay_steps: 0 decay_rate: 0.5 } }") ==
        "s.pbtxt:1:33: training.optimizer.decay_steps: must be >= 1 (is 0)");
  CHECK(error_of("training { steps: 1 optimizer { decay_steps: 10 decay_rate: -1 } }") ==
        "s.pbtxt:1:49: training.optimizer.decay_rate: must be > 0 (is -1)");
}

TEST_CASE("Cluster mistakes: duplicate, unused or missing jobs, LOCAL with many tasks", "[scenario]") {
  std::string duplicate =
      "cluster {\n"
      "  job { name: 'ps' }\n"
      "  job { name: 'worker' }\n"
      "  job { name: 'ps' tasks: 2 }\n"
      "}\n" + k_minimal;
  CHECK(error_of(duplicate) ==
        "s.pbtxt:4:9: cluster.job[2].name: job 'ps' is defined twice (first at 2:9)");

  std::string no_worker =
      "cluster {\n"
      "  job { name: 'ps' }\n"
      "  job { name: 'trainer' tasks: 2 }\n"
      "}\n" + k_minimal;
  CHECK(error_of(no_worker) ==
        "s.pbtxt:1:1: cluster.worker_job: the worker job 'worker' is not in the cluster (jobs: "
        "ps, trainer); name the job that trains with worker_job");
  CHECK(error_of("cluster {\n  job { name: 'worker' }\n  worker_job: 'workers'\n}\n" + k_minimal) ==
        "s.pbtxt:3:3: cluster.worker_job: the worker job 'workers' is not in the cluster (jobs: "
        "worker)");

  std::string unused =
      "cluster {\n"
      "  job { name: 'params' }\n"
      "  job { name: 'worker' tasks: 2 }\n"
      "}\n" + k_minimal;
  CHECK(error_of(unused) ==
        "s.pbtxt:2:9: cluster.job[0].name: job 'params' is not used (the worker job is "
        "'worker', the ps job none); remove it or name it in worker_job or ps_job");
  auto named = parse_scenario(
      "cluster { job { name: 'params' } job { name: 'worker' } ps_job: 'params' }\n" + k_minimal,
      "s.pbtxt");
  REQUIRE(named.ok());
  CHECK(named->cluster().ps_job() == "params");

  CHECK(error_of("cluster { job { name: 'worker' } ps_job: 'ps' }\n" + k_minimal) ==
        "s.pbtxt:1:34: cluster.ps_job: the ps job 'ps' is not in the cluster (jobs: worker)");
  CHECK(error_of("cluster { job { name: 'worker' } ps_job: 'worker' }\n" + k_minimal) ==
        "s.pbtxt:1:34: cluster.ps_job: the ps job must differ from the worker job ('worker')");
  CHECK(error_of("cluster { job { name: 'Worker-1' } worker_job: 'Worker-1' }\n" + k_minimal) ==
        "s.pbtxt:1:17: cluster.job[0].name: 'Worker-1' is not a valid job name (lower-case "
        "letters, digits and '_', starting with a letter)");
  CHECK(error_of("cluster { job { name: 'worker' tasks: 0 } }\n" + k_minimal) ==
        "s.pbtxt:1:32: cluster.job[0].tasks: must be >= 1 (is 0)");
  CHECK(error_of("cluster {\n  mode: LOCAL\n  job { name: 'ps' }\n  job { name: 'worker' tasks: 2 }\n}\n" +
                 k_minimal) ==
        "s.pbtxt:2:3: cluster.mode: LOCAL runs one task but the cluster has 3; use IN_PROCESS "
        "to run several tasks in this process");

  // Backup workers: SYNC only, fewer than the workers.
  std::string two_workers = "cluster { job { name: 'worker' tasks: 2 } }\n";
  CHECK(error_of(two_workers + "training { steps: 1 backup_workers: 1 }") ==
        "s.pbtxt:2:21: training.backup_workers: only SYNC replication has backup workers");
  CHECK(error_of(two_workers + "training { steps: 1 replication: SYNC backup_workers: 2 }") ==
        "s.pbtxt:2:39: training.backup_workers: must be in [0, 2) for 2 worker tasks (is 2)");
  auto sync = parse_scenario(two_workers + "training { steps: 1 replication: SYNC backup_workers: 1 }",
                             "s.pbtxt");
  REQUIRE(sync.ok());
  CHECK(sync->training().backup_workers() == 1);
}

TEST_CASE("Every semantic error is reported, one per line", "[scenario]") {
  std::string e = error_of(
      "model { name: 'vgg' }\n"
      "training {\n"
      "  steps: 0\n"
      "  batch_size: -1\n"
      "}\n");
  CHECK(e ==
        "s.pbtxt:1:9: model.name: unknown model 'vgg' (valid: mlp, lenet)\n"
        "s.pbtxt:3:3: training.steps: must be >= 1 (is 0)\n"
        "s.pbtxt:4:3: training.batch_size: must be >= 1 (is -1)");
}

TEST_CASE("check_dataset_files names a missing file", "[scenario]") {
  scenario::Dataset dataset;
  dataset.set_name("fashion-mnist");
  dataset.set_dir("/no/such/dir");
  status s = check_dataset_files(dataset);
  CHECK(s.error_code() == code::not_found);
  CHECK(contains(s.message(), "'/no/such/dir/train-images-idx3-ubyte.gz'"));
  CHECK(contains(s.message(), "check dataset.dir"));
  CHECK(files_of(dataset).test_labels == "/no/such/dir/t10k-labels-idx1-ubyte.gz");
}

}  // namespace troupe::scenarios

namespace troupe::scenarios {

TEST_CASE("checkpoint: defaults, and each mistake at its position", "[scenario]") {
  auto s = parse_scenario(k_minimal + "checkpoint { dir: \"/tmp/c\" }\n", "s.pbtxt");
  REQUIRE(s.ok());
  CHECK(s->has_checkpoint());
  CHECK(s->checkpoint().every_steps() == 0);
  CHECK(s->checkpoint().keep() == 5);
  CHECK(s->checkpoint().restore() == scenario::Checkpoint::LATEST);
  auto none = parse_scenario(k_minimal, "s.pbtxt");
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_checkpoint());

  std::string e = error_of(k_minimal + "checkpoint { every_steps: 10 }\n");
  CHECK(starts_with(e, "s.pbtxt:2:1: checkpoint.dir: required"));
  e = error_of(k_minimal + "checkpoint {\n  dir: \"/tmp/c\"\n  keep: 0\n}\n");
  CHECK(starts_with(e, "s.pbtxt:4:3: checkpoint.keep: must be >= 1 (is 0)"));
  e = error_of(k_minimal + "checkpoint { dir: \"/tmp/c\" keep: 1001 }\n");
  CHECK(contains(e, "checkpoint.keep: must be <= 1000"));
  e = error_of(k_minimal + "checkpoint { dir: \"/tmp/c\" every_steps: -5 }\n");
  CHECK(contains(e, "checkpoint.every_steps: must be >= 0 (0: only at the end; is -5)"));
  e = error_of(k_minimal + "checkpoint { dir: \"/tmp/c\" restore: EARLIEST }\n");
  CHECK(contains(e, "EARLIEST"));
  CHECK(contains(e, "LATEST"));
  auto restored = parse_scenario(k_minimal + "checkpoint { dir: \"/tmp/c\" restore: NONE every_steps: 50 keep: 2 }\n",
                                 "s.pbtxt");
  REQUIRE(restored.ok());
  CHECK(restored->checkpoint().restore() == scenario::Checkpoint::NONE);
  CHECK(restored->checkpoint().every_steps() == 50);
  CHECK(restored->checkpoint().keep() == 2);
}

}  // namespace troupe::scenarios

namespace troupe::scenarios {

TEST_CASE("supervision: defaults follow the replication; faults: each mistake named", "[scenario]") {
  auto s = parse_scenario(k_minimal, "s.pbtxt");
  REQUIRE(s.ok());
  CHECK(s->supervision().max_restarts() == 5);
  CHECK(s->supervision().within_seconds() == 60);
  CHECK(s->supervision().recovery() == scenario::Supervision::RESTORE_LOST);
  CHECK_FALSE(s->has_faults());
  const std::string cluster = "cluster { job { name: \"ps\" tasks: 1 } job { name: \"worker\" tasks: 2 } }\n";
  const std::string base = "training { steps: 100 }\n" + cluster;
  auto sync = parse_scenario("training { steps: 100 replication: SYNC }\n" + cluster, "s.pbtxt");
  REQUIRE(sync.ok());
  CHECK(sync->supervision().recovery() == scenario::Supervision::ROLLBACK_ALL);
  auto ok = parse_scenario(base + "checkpoint { dir: \"/tmp/c\" }\n"
                                  "supervision { max_restarts: 2 within_seconds: 30 recovery: ROLLBACK_ALL }\n"
                                  "faults {\n"
                                  "  fault { at_step: 30 kill { task: \"/job:ps/task:0\" } }\n"
                                  "  fault { at_step: 40 kill { task: \"/job:worker/replica:0/task:1\" } }\n"
                                  "}\n",
                           "s.pbtxt");
  if (!ok.ok()) FAIL(ok.error().to_string());
  CHECK(ok->faults().fault_size() == 2);
  CHECK(ok->supervision().recovery() == scenario::Supervision::ROLLBACK_ALL);

  std::string e = error_of(base + "supervision { max_restarts: -1 within_seconds: 0 }\n");
  CHECK(contains(e, "supervision.max_restarts: must be >= 0 (is -1)"));
  CHECK(contains(e, "supervision.within_seconds: must be in (0, 86400] (is 0)"));
  e = error_of(base + "faults {\n  fault { kill { task: \"/job:worker/task:1\" } }\n}\n");
  CHECK(contains(e, "s.pbtxt:4:3: faults.fault[0].at_step: required"));
  e = error_of(base + "faults { fault { at_step: 100 kill { task: \"/job:worker/task:1\" } } }\n");
  CHECK(contains(e, "faults.fault[0].at_step: must be in [1, training.steps) = [1, 100) (is 100)"));
  e = error_of(base + "faults { fault { at_step: 5 kill { task: \"worker1\" } } }\n");
  CHECK(contains(e, "faults.fault[0].kill.task: 'worker1' is not a task name"));
  e = error_of(base + "faults { fault { at_step: 5 kill { task: \"/job:worker/task:2\" } } }\n");
  CHECK(contains(e, "job 'worker' has 2 tasks (0 to 1); there is no task 2"));
  e = error_of(base + "faults { fault { at_step: 5 kill { task: \"/job:chief/task:0\" } } }\n");
  CHECK(contains(e, "the cluster has no job 'chief'"));
  e = error_of(base + "faults { fault { at_step: 5 kill { task: \"/job:ps/task:0\" } } }\n");
  CHECK(contains(e, "'/job:ps/task:0' holds variables"));
  CHECK(contains(e, "checkpoint section"));
  e = error_of(base + "faults { fault { at_step: 5 } }\n");
  CHECK(contains(e, "the fault has no kind"));
  // A worker holds no variables when there is a PS job: killing it needs no checkpoint.
  CHECK(parse_scenario(base + "faults { fault { at_step: 5 kill { task: \"/job:worker/task:0\" } } }\n", "s.pbtxt").ok());
}

}  // namespace troupe::scenarios

namespace troupe::scenarios {
namespace {

TEST_CASE("simulation: old SIMULATED files run IN_PROCESS with a note; the section's defaults and mistakes", "[scenario]") {
  const std::string cluster = "cluster {\n  mode: SIMULATED\n  job { name: 'ps' }\n  job { name: 'worker' tasks: 2 }\n}\n";
  // Written before IN_PROCESS existed: every task in this process, in real time, as then.
  std::vector<std::string> notes;
  auto old = parse_scenario(cluster + k_minimal, "old.pbtxt", &notes);
  REQUIRE(old.ok());
  CHECK(old->cluster().mode() == scenario::Cluster::IN_PROCESS);
  REQUIRE(notes.size() == 1);
  CHECK(starts_with(notes[0], "old.pbtxt:2:3: cluster.mode: mode SIMULATED without a simulation section runs as IN_PROCESS"));

  // With a simulation section: virtual time, every default filled in.
  notes.clear();
  auto sim = parse_scenario(cluster + "training { steps: 10 seed: 42 }\nsimulation { network { jitter_us: 5 } }\n",
                            "sim.pbtxt", &notes);
  REQUIRE(sim.ok());
  CHECK(notes.empty());
  CHECK(sim->cluster().mode() == scenario::Cluster::SIMULATED);
  const auto& m = sim->simulation();
  CHECK(m.seed() == 42);  // training.seed
  CHECK(m.network().latency_us() == 50);
  CHECK(m.network().bandwidth_gbps() == 10);
  CHECK(m.network().jitter_us() == 5);
  CHECK(m.compute().table().empty());
  CHECK(m.compute().gflops() == 20);
  CHECK(m.compute().memory_gbps() == 10);
  CHECK(m.compute().kernel_overhead_us() == 1);
  CHECK(m.compute().cores_per_device() == 1);
  CHECK(m.execute_kernels());
  // What a run prints parses back to the same scenario.
  auto again = parse_scenario(scenario_to_text(*sim), "sim.pbtxt");
  REQUIRE(again.ok());
  CHECK(again->SerializeAsString() == sim->SerializeAsString());

  CHECK(error_of("cluster { mode: IN_PROCESS job { name: 'worker' tasks: 2 } }\nsimulation { seed: 1 }\n" + k_minimal) ==
        "s.pbtxt:2:14: simulation.seed: a simulation section is for cluster.mode: SIMULATED (virtual time)");
  CHECK(error_of(cluster + "simulation {\n  network { bandwidth_gbps: 0 latency_us: -1 }\n}\n" + k_minimal) ==
        "s.pbtxt:7:31: simulation.network.latency_us: must be in [0, 10^7] (is -1)\n"
        "s.pbtxt:7:13: simulation.network.bandwidth_gbps: must be in (0, 10^4] (is 0)");
  CHECK(contains(error_of("cluster { mode: IN_PROCESS job { name: 'worker' tasks: 2 } }\nfaults { random { buggify: true } }\n" +
                          k_minimal),
                 "faults.random.buggify: BUGGIFY sites are live only in cluster.mode: SIMULATED"));
  CHECK(contains(error_of(cluster + "simulation { network { nic_gbps: -1 } compute { noise: 101 } }\n" + k_minimal),
                 "simulation.network.nic_gbps: must be in [0, 10^4] (is -1)"));
  CHECK(contains(error_of(cluster + "simulation { network { nic_gbps: -1 } compute { noise: 101 } }\n" + k_minimal),
                 "simulation.compute.noise: must be in [0, 100] (is 101)"));
  CHECK(contains(error_of(cluster + "simulation { network { process_cpu_us: 200000 } }\n" + k_minimal),
                 "simulation.network.process_cpu_us: must be in [0, 10^5] (is 200000)"));
  CHECK(contains(error_of(cluster + "simulation { compute { task_cpu_us: -1 } }\n" + k_minimal),
                 "simulation.compute.task_cpu_us: must be in [0, 10^5] (is -1)"));
  CHECK(contains(error_of(cluster + "simulation { network { busy_wait_us: -5 } }\n" + k_minimal),
                 "simulation.network.busy_wait_us: must be in [0, 10^6] (is -5)"));
  CHECK(contains(error_of(cluster + "simulation { network { send_busy_wait_us: 2e6 } }\n" + k_minimal),
                 "simulation.network.send_busy_wait_us: must be in [0, 10^6] (is 2e+06)"));
  CHECK(error_of(cluster + "simulation { compute { cores_per_device: 0 } }\n" + k_minimal) ==
        "s.pbtxt:6:24: simulation.compute.cores_per_device: must be >= 1 (is 0)");
  auto shapes = parse_scenario(cluster + "simulation { execute_kernels: false }\n" + k_minimal, "s.pbtxt");
  REQUIRE(shapes.ok());
  CHECK_FALSE(shapes->simulation().execute_kernels());
  CHECK(contains(error_of(cluster + "simulation { execute_kernels: false }\ncheckpoint { dir: '/tmp/x' }\n" + k_minimal),
                 "simulation.execute_kernels: false cannot go with a checkpoint section: a shape-only simulation "
                 "(execute_kernels: false) computes no values to save"));
  CHECK(contains(error_of(cluster + "simulation { execute_kernels: false }\nreport { expect { min_test_accuracy: 0.5 } }\n" +
                          k_minimal),
                 "simulation.execute_kernels: false cannot go with report.expect"));
}

}  // namespace
}  // namespace troupe::scenarios
