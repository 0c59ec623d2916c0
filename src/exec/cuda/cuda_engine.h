// `braid train` on one GPU (`devices: cuda` or `cuda:N`): the DeviceEngine (exec/device_engine.h) of the CUDA
// backend. The training graph runs through CudaExecutor (bf16 autocast under `precision: bf16`), gradients are
// accumulated over micro-batches and updated by CudaOptimizer's fused AdamW / SGD on the device, clipping by the
// device norm; checkpoints and evaluation see whole host tensors through to_host / from_host, and evaluation
// batches run on the device through an executor of the evaluation graph per batch size.
#pragma once

namespace braid::exec {

// Registers the CUDA engine for device kind "cuda" (the braid binary's main calls it in CUDA builds; tests that
// drive exec::train on cuda call it too). Idempotent.
void install_cuda_engine();

}  // namespace braid::exec
