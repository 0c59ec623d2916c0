// The Plan: how a graph is laid out on devices. A summary a person reads at a glance, pipeline stages
// (each a device group holding an inclusive range of forward layers in topological order), and per-layer
// split signatures. Its YAML form is MODEL_FORMAT.md's plan file (docs/plan_file.md); a plan read from a
// file remembers which fields were written (pins, with their file:line:col) so that the planner keeps them
// as constraints and validation names the place of every mistake. Pure data: nothing here runs anything.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/ir.h"

namespace braid::planner {

struct DeviceSpec {
  std::string kind = "cpu";  // cpu | cuda
  int count = 1;
  std::vector<int> ids;      // cuda:0-7 -> 0..7
};

// Parses "cpu", "cpu:4", "cuda", "cuda:0-7", "cuda:0,2"; nullopt-like: returns false and sets *err.
bool parse_devices(const std::string& text, DeviceSpec* out, std::string* err);
// How many device strings parse_devices has parsed in this process (a relaxed atomic, for tests that count a run's).
int64_t parse_count();

// The fields of one plan entry that a plan file wrote, by YAML key ("micro_batches",
// "predicted.step_time_s"), each with the place its value was written. A written field is a pin: the
// planner keeps it as a constraint and completes only the others. Plans built in code have no pins.
struct Pins {
  std::map<std::string, SourceLoc> at;
  bool has(const std::string& key) const { return at.count(key) > 0; }
  // Where `key` was written, or `fallback` when it was not.
  SourceLoc loc(const std::string& key, const SourceLoc& fallback) const;
  void set(const std::string& key, const SourceLoc& where) { at[key] = where; }
};

// The planner's estimates. Kept on a round trip; never constraints (the planner recomputes them).
struct Predicted {
  double step_time_s = 0;
  double tflops_per_device = 0;
  double peak_memory_gb = 0;
  std::string bound_by;  // compute | memory | communication | bubble; "" = not predicted
};

struct Summary {
  int devices = 1;           // distinct devices the stages use
  int data_parallel = 1;     // replicas of the whole model: axis 0 of every stage's mesh
  int tensor_parallel = 1;   // largest tensor_parallel of any layer
  int pipeline_stages = 1;   // device groups in the pipeline (stages / virtual_stages)
  int virtual_stages = 1;    // model chunks per device group (interleaved only; else 1)
  int64_t micro_batch = 1;   // samples per micro-batch per data-parallel replica
  int64_t micro_batches = 1; // per optimizer step, per data-parallel replica
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved
  // Activation recomputation of every layer without a `recompute` of its own: none | full | selective
  // (docs/plan_file.md). Written only when not none.
  std::string recompute = "none";
  // Optimizer-state sharding over every stage's data-parallel group (ZeRO): 0 none, 1 optimizer state sharded
  // (docs/plan_file.md). Written only when not 0.
  int zero = 0;
  // Sequence parallelism (Megatron-SP) inside every tensor group: the layers left replicated whose values are
  // [batch, seq, hidden] and whose op splits on axis 1 (layer norms, dropout, residual adds, activations) run on
  // their tensor rank's part of the sequence (signature split1); the lowering reshards around them (an all-reduce
  // becomes reduce-scatter + all-gather). Needs tensor_parallel > 1. Written only when true.
  bool sequence_parallel = false;
  Predicted predicted;
  SourceLoc loc;             // the summary mapping
  Pins pinned;               // keys as written: "devices", ..., "predicted.bound_by"
};

struct StagePlan {
  std::vector<int> devices;      // device ids of the stage's group (indices into the run's device list)
  std::vector<int64_t> mesh;     // group shape [dp, tp]: axis 0 data-parallel, the rest the tensor group;
                                 // `devices` fill it in row-major order (replica 0 is devices[0..tp))
  std::string first_layer;       // inclusive range of forward layers, topological (model file) order
  std::string last_layer;
  int virtual_index = 0;         // which model chunk of its device group this stage is (interleaved)
  SourceLoc loc;                 // the stage's entry
  std::vector<SourceLoc> device_locs;  // one per device when read from a file
  Pins pinned;                   // "devices", "mesh", "first_layer", "last_layer", "virtual"
};

struct LayerPlan {
  std::string layer;
  std::string signature;         // a name from the op's splits() for the layer's shapes
  int tensor_parallel = 1;       // devices of the stage's tensor group the signature splits over
  std::string recompute;         // none | full | selective; "": the summary's
  double predicted_time_s = 0;   // forward + backward of one micro-batch (estimate)
  double predicted_memory_gb = 0;
  SourceLoc loc;                 // the layer's entry
  Pins pinned;                   // "layer", "signature", "tensor_parallel", "predicted.time_s", ...
};

// The recomputation mode of `layer` under `plan`: its entry's, else the summary's.
struct Plan;
const std::string& recompute_of(const Plan& plan, const std::string& layer);

struct Plan {
  Summary summary;
  std::vector<StagePlan> stages;  // in pipeline order: stage i feeds stage i + 1
  std::vector<LayerPlan> layers;  // entries for some or all forward layers; unlisted ones are replicated
  SourceLoc loc;                  // the file (1:1) when read from one
  Pins pinned;                    // top-level keys written: "summary", "stages", "layers"
};

// The single-device plan of a graph: one stage on device 0 holding every forward layer, mesh [1, 1], every
// layer "replicated" with tensor_parallel 1 ("replicated" is the one signature every op offers for every
// shape; "data" is not: attention with dropout lacks it), micro-batches as the run file says.
Plan single_device_plan(const graph::Graph& g, int64_t batch, int64_t micro_batch);
// The same summary without stages or layers, for callers that have no graph; it does not validate.
Plan single_device_plan(int64_t batch, int64_t micro_batch);

// Forward nodes of `g` (one per model layer) in topological order: the order stages cut.
std::vector<const graph::Node*> forward_layers(const graph::Graph& g);

// Gives every forward layer without an entry the default one ("replicated", tensor_parallel 1, unpinned)
// and orders `plan.layers` topologically. Entries naming no layer of `g`, and second entries of a layer, are
// kept at the end (validate_plan reports them).
void add_default_layers(Plan& plan, const graph::Graph& g);

// The plan file (docs/plan_file.md): summary, then stages, then layers; the same plan gives the same bytes.
// Numbers are written in their shortest form that reads back to the same value.
std::string to_yaml(const Plan& plan);

// Reads a plan file. Every syntax, key, type and missing-field mistake goes to diags with its file:line:col,
// all in one pass; the plan returned holds what could be read. Values are checked by validate_plan.
Plan parse_plan(const std::string& text, const std::string& path, Diagnostics& diags);
Plan read_plan(const std::string& path, Diagnostics& diags);

// Checks a complete plan against the graph it runs (forward layers, ops and shapes), the global batch per
// optimizer step and the devices of the run: device ids, groups and meshes, stage cuts (contiguous, in
// order, every layer exactly once), layer names, signatures offered by each op, tensor groups, even splits,
// micro-batches, schedule and virtual stages, and that the summary agrees with the detail. Errors are located
// at the plan file's fields (or carry no location for plans built in code). Run it only on a plan that
// parsed without errors.
void validate_plan(const Plan& plan, const graph::Graph& g, int64_t global_batch, const DeviceSpec& devices,
                   Diagnostics& diags);

}  // namespace braid::planner
