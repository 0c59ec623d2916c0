// oneDNN 2.6's convolution primitives on the benchmark models' shapes (and a few channel counts), one thread,
// by thread CPU time: plain NCHW / OIHW layouts (oneDNN picks its GEMM convolution) against the layouts it
// chooses itself (format_tag::any: blocked, its JIT kernels), the latter including the reorders of braid's
// plain tensors to and from them, in chunks of 8 samples as src/ops/cpu/onednn_spatial.cpp runs them.
// Milliseconds per batch of 128, the second best of 7. Run by scripts/bench/conv_primitives.sh.
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
static double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
struct Shape { const char* name; int B, C, H, W, O, k, s, p; };
int main() {
  omp_set_num_threads(1);
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  const Shape shapes[] = {
      {"lenet conv1", 128, 1, 28, 28, 32, 5, 1, 0},   {"lenet conv2", 128, 32, 12, 12, 64, 5, 1, 0},
      {"resnet 16x28", 128, 16, 28, 28, 16, 3, 1, 1}, {"resnet down", 128, 16, 14, 14, 32, 3, 2, 1},
      {"resnet 32x7", 128, 32, 7, 7, 32, 3, 1, 1},    {"C3 32x32", 128, 3, 32, 32, 32, 3, 1, 1},
      {"C4 28x28", 128, 4, 28, 28, 16, 3, 1, 1},      {"C6 14x14", 128, 6, 14, 14, 16, 5, 1, 0},
      {"C8 28x28", 128, 8, 28, 28, 16, 3, 1, 1}};
  const int B = 8;  // samples per chunk
  std::printf("%-13s %-6s %-16s %8s %8s %8s\n", "shape", "layout", "impl (fwd)", "fwd", "bwd_d", "bwd_w");
  for (const auto& s : shapes) {
    const int Ho = (s.H + 2 * s.p - s.k) / s.s + 1, Wo = (s.W + 2 * s.p - s.k) / s.s + 1;
    const memory::dims xd{B, s.C, s.H, s.W}, wd{s.O, s.C, s.k, s.k}, yd{B, s.O, Ho, Wo}, strides{s.s, s.s}, pads{s.p, s.p};
    for (int blocked = 0; blocked < 2; ++blocked) {
      const tag at = blocked ? tag::any : tag::nchw, wt = blocked ? tag::any : tag::oihw;
      const memory::desc x_md(xd, dt::f32, at), w_md(wd, dt::f32, wt), b_md({s.O}, dt::f32, tag::x), y_md(yd, dt::f32, at);
      const memory::desc xu(xd, dt::f32, tag::nchw), wu(wd, dt::f32, tag::oihw), yu(yd, dt::f32, tag::nchw);
      primitive_attr attr;
      attr.set_scratchpad_mode(scratchpad_mode::user);
      auto fpd = convolution_forward::primitive_desc(
          convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, x_md, w_md, b_md, y_md,
                                    strides, pads, pads), attr, eng);
      auto dpd = convolution_backward_data::primitive_desc(
          convolution_backward_data::desc(algorithm::convolution_direct, x_md, w_md, y_md, strides, pads, pads), attr, eng, fpd);
      auto wpd = convolution_backward_weights::primitive_desc(
          convolution_backward_weights::desc(algorithm::convolution_direct, x_md, w_md, y_md, strides, pads, pads), attr, eng, fpd);
      auto mk = [&](const memory::desc& d) { return memory(d, eng); };
      memory x = mk(xu), w = mk(wu), b = mk(b_md), y = mk(yu), dx = mk(xu), dy = mk(yu), dw = mk(wu);
      for (memory* m : {&x, &w, &b, &dy}) {
        float* p = static_cast<float*>(m->get_data_handle());
        for (size_t i = 0; i < m->get_desc().get_size() / 4; ++i) p[i] = static_cast<float>((i * 7919) % 1000) / 1000.f - 0.5f;
      }
      memory xb = mk(fpd.src_desc()), wb = mk(fpd.weights_desc()), yb = mk(fpd.dst_desc()), dyb = mk(dpd.diff_dst_desc()),
             dxb = mk(dpd.diff_src_desc()), wdb = mk(dpd.weights_desc()), dwb = mk(wpd.diff_weights_desc()),
             dyw = mk(wpd.diff_dst_desc()), xw = mk(wpd.src_desc());
      memory sf = mk(fpd.scratchpad_desc()), sd = mk(dpd.scratchpad_desc()), sw = mk(wpd.scratchpad_desc());
      auto re = [&](memory& a, memory& c) { return a.get_desc() != c.get_desc() ? reorder(a, c) : reorder(); };
      reorder rx = re(x, xb), rw = re(w, wb), ry = re(yb, y), rdy = re(dy, dyb), rwd = re(w, wdb), rdx = re(dxb, dx),
              rdw = re(dwb, dw), rdyw = re(dy, dyw), rxw = re(x, xw);
      auto run = [&](reorder& r, memory& a, memory& c) {
        if (a.get_desc() != c.get_desc()) r.execute(st, a, c);
      };
      convolution_forward f(fpd);
      convolution_backward_data d(dpd);
      convolution_backward_weights g(wpd);
      auto time = [&](auto&& fn) {
        fn();
        std::vector<double> t;
        for (int r = 0; r < 7; ++r) {
          const double t0 = cpu_now();
          for (int q = 0; q < s.B / B; ++q) fn();
          t.push_back(cpu_now() - t0);
        }
        std::sort(t.begin(), t.end());
        return t[1] * 1e3;
      };
      const double tf = time([&] {
        run(rx, x, xb), run(rw, w, wb);
        f.execute(st, {{DNNL_ARG_SRC, xb}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, yb}, {DNNL_ARG_SCRATCHPAD, sf}});
        run(ry, yb, y);
      });
      const double td = time([&] {
        run(rdy, dy, dyb), run(rwd, w, wdb);
        d.execute(st, {{DNNL_ARG_DIFF_DST, dyb}, {DNNL_ARG_WEIGHTS, wdb}, {DNNL_ARG_DIFF_SRC, dxb}, {DNNL_ARG_SCRATCHPAD, sd}});
        run(rdx, dxb, dx);
      });
      const double tw = time([&] {
        run(rdyw, dy, dyw), run(rxw, x, xw);
        g.execute(st, {{DNNL_ARG_DIFF_DST, dyw}, {DNNL_ARG_SRC, xw}, {DNNL_ARG_DIFF_WEIGHTS, dwb}, {DNNL_ARG_SCRATCHPAD, sw}});
        run(rdw, dwb, dw);
      });
      std::printf("%-13s %-6s %-16s %8.2f %8.2f %8.2f\n", s.name, blocked ? "any" : "plain", fpd.impl_info_str(), tf, td, tw);
    }
  }
}
