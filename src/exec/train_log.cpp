// What a training run says (train_parts.h): the banner before the first step, and TrainLog, the metrics file and
// the terminal's lines while it trains and at its end. The text is tests/cli's to compare: change a line here and
// the end-to-end tests say so. Nothing here decides what the run does.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "exec/train_parts.h"

namespace braid::exec {

void print_banner(FILE* out, const io::RunConfig& cfg, const std::optional<RunPlan>& run, Engine& engine,
                  int64_t parameters, int64_t total_steps, const io::Dataset& train_data) {
  const planner::Plan& plan = engine.plan();
  const bool on_accelerator = engine.backend().accelerator();
  const int64_t batch = cfg.train.batch;
  const int64_t micro = cfg.train.micro_batch.value_or(batch);
  // The micro-batching in force: the plan's under a plan (per data-parallel replica), else the run's.
  const std::string split =
      run ? BRAID_STR(plan.summary.data_parallel, " replica(s) x ", plan.summary.micro_batches, " micro-batch(es) of ",
                      plan.summary.micro_batch)
          : BRAID_STR(batch / micro, " micro-batch(es) of ", micro);
  std::fprintf(out, "braid: training %s: %lld parameters, %lld steps of batch %lld (%s), %s\n",
               cfg.model.name.c_str(), static_cast<long long>(parameters), static_cast<long long>(total_steps),
               static_cast<long long>(batch), split.c_str(), train_data.describe().c_str());
  if (run && !on_accelerator) {
    const std::string memory_strategies =
        (plan.summary.zero ? BRAID_STR("; ",
                                       plan.summary.zero == 1   ? "optimizer state"
                                       : plan.summary.zero == 2 ? "optimizer state and gradients"
                                                                : "optimizer state, gradients and parameters",
                                       " sharded (zero ", plan.summary.zero, ")")
                           : std::string()) +
        (plan.summary.sequence_parallel ? std::string("; sequence parallel") : std::string()) +
        (plan.summary.recompute != "none" ? "; recompute " + plan.summary.recompute : std::string());
    std::string slots;
    for (int sl : engine.stage_slots()) slots += (slots.empty() ? "" : ",") + std::to_string(sl);
    std::fprintf(out, "braid: plan %s on %s: %d stage(s), data parallel %d, tensor parallel %d, %s schedule, "
                 "%lld micro-batches of %lld per replica; in flight per stage: %s%s\n",
                 run->automatic ? "auto" : cfg.parallel.plan.c_str(), cfg.devices.c_str(),
                 static_cast<int>(engine.programs().size()), plan.summary.data_parallel, plan.summary.tensor_parallel,
                 plan.summary.schedule.c_str(), static_cast<long long>(plan.summary.micro_batches),
                 static_cast<long long>(plan.summary.micro_batch), slots.c_str(), memory_strategies.c_str());
  }
  if (on_accelerator) std::fprintf(out, "braid: training on %s\n", engine.describe().c_str());
  if (run && run->automatic)
    std::fprintf(out, "braid: planner chose %s; searched in %.2f s\n", run->summary.c_str(), run->search_s);
  if (!run && !on_accelerator && plan.summary.data_parallel > 1)
    std::fprintf(out, "braid: data parallel on %s: %d replicas of %lld samples per micro-batch, %zu gradient bucket(s)\n",
                 cfg.devices.c_str(), plan.summary.data_parallel, static_cast<long long>(plan.summary.micro_batch),
                 engine.bucket_bytes(0).empty() ? size_t{0} : engine.bucket_bytes(0)[0].size());
}

void print_memory(FILE* out, const MemoryReport& m) {
  std::string line;
  auto mib = [](size_t b) { return BRAID_STR(std::lround(static_cast<double>(b) / 1048576.0 * 10) / 10.0); };
  for (size_t i = 0; i < m.memory.size() && i < 8; ++i)
    line += BRAID_STR(i ? "; " : "", "device ", m.local[i], ": arena ", mib(m.memory[i].arena), ", parameters ",
                      mib(m.memory[i].parameters), ", gradients ", mib(m.memory[i].gradients), ", optimizer ",
                      mib(m.memory[i].optimizer));
  if (m.memory.size() > 8) line += BRAID_STR("; ... (", m.memory.size(), " devices)");
  std::fprintf(out, "braid: memory (MiB) %s\n", line.c_str());
}

std::string scores_str(const Scores& e) {
  std::string s;
  char buf[64];
  for (const auto& [k, v] : e) {
    if (k == "accuracy") std::snprintf(buf, sizeof buf, "%s %.2f%%", k.c_str(), 100 * v);
    else std::snprintf(buf, sizeof buf, "%s %.4f", k.c_str(), v);
    s += (s.empty() ? "" : ", ") + std::string(buf);
  }
  return s;
}

namespace {

std::unique_ptr<io::MetricsWriter> open_metrics(const io::RunConfig& cfg, bool rank0, int64_t start_step) {
  if (cfg.log.metrics.empty() || !rank0) return nullptr;
  std::error_code ec;
  auto parent = std::filesystem::path(cfg.log.metrics).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  return std::make_unique<io::MetricsWriter>(cfg.log.metrics, /*append=*/start_step > 0);
}

}  // namespace

TrainLog::TrainLog(const io::RunConfig& cfg, bool rank0, FILE* out, bool progress, int64_t total_steps,
                   int64_t start_step)
    : cfg_(cfg),
      out_(out),
      metrics_(open_metrics(cfg, rank0, start_step)),
      progress_(out, progress && io::Progress::is_tty(out), total_steps, std::max<int64_t>(1, cfg.log.every_steps),
                start_step),
      total_steps_(total_steps) {}

void TrainLog::closed_loop(ClosedLoop& loop, int64_t step, int64_t first_step, int64_t total_steps, double step_s,
                           const RunPlan& run, Engine& engine) {
  loop.record(step - first_step, step_s, engine);
  const std::string metrics_path = metrics_ ? metrics_->path() : std::string();  // for the closed loop's advice
  if (auto rec = loop.report(step - first_step, total_steps - first_step, run, engine, out_, metrics_path);
      rec && metrics_) {
    rec->step = step + 1;
    metrics_->write(*rec);
  }
}

bool TrainLog::log_step(int64_t step) const {
  return (step + 1) % std::max<int64_t>(1, cfg_.log.every_steps) == 0 || step + 1 == total_steps_;
}

void TrainLog::step(int64_t step, double loss, double lr) {
  window_samples_ += cfg_.train.batch;
  double secs = std::chrono::duration<double>(TrainClock::now() - window_start_).count();
  samples_per_s_ = secs > 0 ? static_cast<double>(window_samples_) / secs : 0;
  progress_.update(io::ProgressStats{step + 1, loss, lr, samples_per_s_});
}

void TrainLog::eval_line(int64_t step, const Scores& s) {
  progress_.message("step " + std::to_string(step + 1) + " eval: " + scores_str(s));
}

void TrainLog::record(int64_t step, const StepResult& r, double lr, int64_t epoch, Engine& engine, const Scores& eval,
                      bool evaluated, const MemoryReport& memory) {
  const bool logged = log_step(step);
  if (metrics_ && (logged || evaluated)) {
    io::MetricsRecord rec;
    rec.step = step + 1;
    rec.kind = "train";
    rec.loss = r.loss;
    rec.lr = lr;
    rec.samples_per_s = samples_per_s_;
    rec.extra.emplace_back("epoch", static_cast<double>(epoch));
    if (r.grad_norm >= 0) rec.extra.emplace_back("grad_norm", r.grad_norm);
    for (const auto& kv : engine.step_metrics()) rec.extra.push_back(kv);
    if (!memory_logged_)  // the run's first record: what each device holds
      for (size_t i = 0; i < memory.memory.size(); ++i) {
        const std::string d = "_d" + std::to_string(memory.local[i]);
        rec.extra.emplace_back("mem_arena_bytes" + d, static_cast<double>(memory.memory[i].arena));
        rec.extra.emplace_back("mem_param_bytes" + d, static_cast<double>(memory.memory[i].parameters));
        rec.extra.emplace_back("mem_grad_bytes" + d, static_cast<double>(memory.memory[i].gradients));
        rec.extra.emplace_back("mem_optimizer_bytes" + d, static_cast<double>(memory.memory[i].optimizer));
      }
    memory_logged_ = true;
    for (const auto& [k, v] : eval) rec.extra.emplace_back("eval_" + k, v);
    metrics_->write(rec);
  }
  if (logged) {
    window_start_ = TrainClock::now();
    window_samples_ = 0;
  }
}

void TrainLog::stopped(int64_t steps, const std::string& last_checkpoint) {
  progress_.message("stopped after step " + std::to_string(steps) + (last_checkpoint.empty()
                                                                         ? " (no checkpoint.dir: nothing saved)"
                                                                         : "; checkpoint " + last_checkpoint));
}

void TrainLog::final_eval(int64_t total_steps, int64_t samples, const Scores& s) {
  std::fprintf(out_, "braid: final eval on %lld samples: %s\n", static_cast<long long>(samples), scores_str(s).c_str());
  if (!metrics_) return;
  io::MetricsRecord rec;
  rec.step = total_steps;
  rec.kind = "eval";
  for (const auto& [k, v] : s) rec.extra.emplace_back("eval_" + k, v);
  metrics_->write(rec);
}

void TrainLog::summary(int64_t steps, double secs, double samples_per_s) {
  std::fprintf(out_, "braid: %lld steps in %.1f s (%.0f samples/s)\n", static_cast<long long>(steps), secs,
               samples_per_s);
}

}  // namespace braid::exec
