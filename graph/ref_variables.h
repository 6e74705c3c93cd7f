// TensorFlow 1.x reference variables, rewritten to troupe's resource variables when a
// GraphDef is loaded (graph::from_graph_def calls this when it finds a VariableV2).
//
// Every TF 1.x release before resource variables became the default (and TF 2 with
// tf.compat.v1.disable_resource_variables()) writes variables as `VariableV2` nodes whose
// output is a reference that other ops read or update in place. troupe's variables are
// actors reached through handles, so the rewrite maps each reference op to its resource
// twin, keeping node names (so feeds, fetches and targets still name what the user wrote):
//
//   VariableV2 / Variable (dtype, shape, container, shared_name) -> VarHandleOp (same attrs)
//   Identity reading a variable (TF's `w/read`)                   -> ReadVariableOp
//   any other op reading a variable's value                       -> reads it through one
//                                                                    added ReadVariableOp,
//                                                                    `<variable>/_troupe_value`
//   IsVariableInitialized                                         -> VarIsInitializedOp
//   Assign, AssignAdd, AssignSub, ScatterAdd,
//   ApplyGradientDescent, ApplyMomentum, ApplyAdagrad, ApplyAdam,
//   ApplyRMSProp                                                  -> the resource op, named
//                                                                    `<node>/_troupe_update`;
//                                                                    the node's own name
//                                                                    becomes a ReadVariableOp
//                                                                    of the updated variable,
//                                                                    run after the update
//
// so that fetching `w/Assign:0` gives the new value, as in TensorFlow, and a control
// dependency on `w/Assign` (or a target) waits for the update. Reads are snapshots taken
// when the read runs; TensorFlow's reference reads alias the variable's buffer, so a value
// read and updated in one step without an edge between them may differ (TensorFlow leaves
// that order undefined too).
//
// Errors (invalid_argument, naming the node): a reference input that does not come
// straight from a variable (through RefIdentity, Switch, ...), and any other op that takes
// a reference (ScatterSub, ScatterUpdate, ApplyAdadelta, ...): troupe has no twin for it.
#pragma once

#include "core/status.h"
#include "graph/proto/graph.pb.h"

namespace troupe::graph {

// True when the graph has a reference variable (a VariableV2 or Variable node).
bool has_ref_variables(const tf::GraphDef& def);

// Rewrites the graph in place as above. On error the graph is left partly rewritten.
[[nodiscard]] status rewrite_ref_variables(tf::GraphDef* def);

}  // namespace troupe::graph
