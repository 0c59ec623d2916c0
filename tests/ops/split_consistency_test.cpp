// Split consistency over the whole registry: every public op's samples in double, in training and in eval,
// with every op call of the forward and of its gradient rule recorded; each call is run on 2 and 3 shards
// under every split signature it offers and reassembled (S concatenated, B equal, P summed), which must give
// the unsplit call (op_harness: check_call_splits). Documented exceptions, applied by the harness: a loss's
// P value is each shard's mean, combined as sum_k (N_k / N) mean_k, and its gradient op gets dloss * N_k / N
// (loss.cpp); batch_norm(_grad)'s `data` signature is checked in eval only (eval_only_reason).
// Then coverage: every op with a CPU kernel was reached and every signature it offered was checked.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>

#include "op_harness.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;

namespace {

// Not reached from a public op, by design: the lowering puts them in place of batch_norm when
// parallel.sync_batch_norm is on, and their sums are all-reduced over the data-parallel group, so they are
// exercised end to end (one device against every strategy) by Parallel.StrategiesAgree. The collective
// comm_* ops (OpDef::collective) have no CPU kernel and are skipped likewise.
const std::set<std::string> kLoweringOnly = {"bn_sync_sum", "bn_sync_sqdev", "bn_sync_apply", "bn_sync_grad_sums",
                                             "bn_sync_grad"};

struct Coverage {
  int calls = 0;
  std::set<std::string> offered, checked;
  std::map<std::string, std::string> eval_only;  // signature -> reason
};

std::string joined(const std::set<std::string>& s) {
  std::string r;
  for (const auto& x : s) r += (r.empty() ? "" : " ") + x;
  return r;
}

}  // namespace

TEST(SplitConsistency, EverySignatureOfEveryOpReassemblesTheUnsplitResult) {
  Rng rng(3, 3);
  std::map<std::string, Coverage> cov;
  for (const auto* def : public_ops()) {
    for (const auto& s : def->samples()) {
      for (bool training : {true, false}) {
        SCOPED_TRACE(def->name + "/" + s.name + (training ? " (training)" : " (eval)"));
        Instance inst = instantiate(*def, s, DType::f64, rng);
        for (const auto& call : record_forward_backward(inst, training, rng)) {
          Coverage& c = cov[call.op];
          ++c.calls;
          for (const auto& r : check_call_splits(call, rng)) {
            c.offered.insert(r.name);
            if (!r.shards.empty()) c.checked.insert(r.name);
            if (r.skipped) c.eval_only[r.name] = r.skipped;
          }
        }
      }
    }
  }

  // cast comes from graphs with 16-bit values (graph::BuildOptions::half), not from a public op's samples: its
  // signatures are checked on a call of its own (f64 -> f32, an exact narrowing for these values).
  {
    Call call;
    call.op = "cast";
    call.attrs = ops::Attrs{{"dtype", std::string("f32")}};
    Tensor x = Tensor::empty({Shape{4, 6, 2}, DType::f64});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = 0.25 * static_cast<double>(i % 9) - 1.0;
    call.inputs = {x};
    Coverage& c = cov["cast"];
    ++c.calls;
    for (const auto& r : check_call_splits(call, rng)) {
      c.offered.insert(r.name);
      if (!r.shards.empty()) c.checked.insert(r.name);
    }
  }

  for (const auto& name : kLoweringOnly) EXPECT_NE(Registry::get().find(name), nullptr) << name << " is gone";
  int ops = 0, sigs = 0;
  for (const auto* def : Registry::get().all()) {
    if (def->collective || kLoweringOnly.count(def->name)) continue;
    SCOPED_TRACE(def->name);
    auto it = cov.find(def->name);
    if (it == cov.end()) {
      ADD_FAILURE() << "never reached from a public op's samples (forward or gradient)";
      continue;
    }
    const Coverage& c = it->second;
    for (const auto& sig : c.offered)
      EXPECT_TRUE(c.checked.count(sig)) << "signature " << sig << ": no sample has an axis long enough to split";
    ++ops;
    sigs += static_cast<int>(c.checked.size());
    std::printf("[ splits ] %-22s %2zu offered, %2zu checked, %3d calls: %s\n", def->name.c_str(), c.offered.size(),
                c.checked.size(), c.calls, joined(c.checked).c_str());
    for (const auto& [sig, why] : c.eval_only)
      std::printf("[ splits ] %-22s   %s checked in eval only: %s\n", "", sig.c_str(), why.c_str());
  }
  std::printf("[ splits ] %d ops, %d signatures checked\n", ops, sigs);
}
