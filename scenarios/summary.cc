#include "scenarios/summary.h"

#include "graph/text_proto.h"

namespace troupe::scenarios {

scenario::RunSummary make_run_summary(const scenario::Scenario& s, const run_summary* summary, const status& error,
                                      double wall_seconds) {
  scenario::RunSummary out;
  out.set_scenario(s.name());
  out.set_seed(s.training().seed());
  out.set_mode(scenario::Cluster::Mode_Name(s.cluster().mode()));
  out.set_wall_seconds(wall_seconds);
  auto* checkpoints = out.mutable_checkpoints();
  checkpoints->set_latest_step(-1);
  checkpoints->set_restored_step(-1);
  if (!error.ok()) out.set_error(error.to_string());
  if (summary == nullptr) {
    out.mutable_expectations()->set_passed(false);
    return out;
  }
  out.set_global_step(summary->steps);
  out.set_test_accuracy(summary->test_accuracy);
  out.set_final_loss(summary->final_loss);
  out.set_virtual_seconds(summary->virtual_seconds);
  out.set_training_seconds(summary->seconds);
  out.set_steady_seconds(summary->steady_seconds);
  out.set_steady_steps(summary->steady_steps);
  out.set_liveness_ms(summary->liveness_ms);
  out.set_links_clogged(summary->links_clogged);
  out.set_messages_arrived(summary->messages_arrived);
  out.set_messages_arrived_busy(summary->messages_arrived_busy);
  out.set_messages_sent(summary->messages_sent);
  out.set_messages_sent_busy(summary->messages_sent_busy);
  out.set_shape_only(summary->shape_only);
  for (const auto& [site, n] : summary->buggify_fires) (*out.mutable_buggify_fires())[site] = n;
  const auto& c = summary->checkpoints;
  checkpoints->set_committed(c.committed);
  checkpoints->set_failed(c.failed);
  checkpoints->set_latest_path(c.latest_path);
  checkpoints->set_latest_step(c.latest_step);
  checkpoints->set_restored_path(c.restored_path);
  checkpoints->set_restored_step(c.restored_step);
  for (const auto& f : summary->faults) {
    auto* fault = out.add_faults();
    fault->set_kind(f.kind);
    fault->set_task(f.task);
    fault->set_at_step(f.at_step);
    fault->set_recovered(f.recovered);
    fault->set_recovery_seconds(f.recovery_seconds);
  }
  for (const auto& [task, count] : summary->restarts) (*out.mutable_restarts())[task] = count;
  out.set_steps_retried(summary->steps_retried);
  if (summary->sync.present) {
    const auto& s = summary->sync;
    auto* sync = out.mutable_sync();
    sync->set_replicas_to_aggregate(s.replicas_to_aggregate);
    sync->set_backup_workers(s.backup_workers);
    sync->set_stale_gradients_dropped(s.stale);
    sync->set_backup_gradients_dropped(s.backup);
    for (const auto& [task, c] : s.workers) {
      auto& w = (*sync->mutable_workers())[task];
      w.set_used(c.used);
      w.set_stale(c.stale);
      w.set_backup(c.backup);
    }
  }
  auto* expectations = out.mutable_expectations();
  expectations->set_passed(summary->expectations_met && error.ok());
  for (const auto& f : summary->expectation_failures) expectations->add_failures(f);
  return out;
}

result<std::string> summary_json(const scenario::RunSummary& summary) {
  return graph::to_json(summary, "the run summary");
}

}  // namespace troupe::scenarios
