# Checkpoints end to end through the braid binary (tests/ckpt/ckpt_test.py, Debian's python3):
# Checkpoint.InspectBadFiles: `braid inspect` on non-checkpoints exits 2 naming the file.
# Checkpoint.ToTorch.<model>: `braid train` (2 steps, checkpoint.dir set) writes step_00000002.h5 and `latest`,
# `braid inspect` reads it, scripts/ckpt_to_torch.py loads it into the PyTorch model (tied_gpt: a tied head).
# Skipped (77) until `braid train` has --resume (the trainer integration) and where torch/h5py are missing.
# Included from tests/CMakeLists.txt when the braid target exists.
add_test(NAME Checkpoint.InspectBadFiles
         COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/ckpt_test.py --braid $<TARGET_FILE:braid>
                 --workdir ${CMAKE_BINARY_DIR}/ckpt_test/bad --bad)
set_tests_properties(Checkpoint.InspectBadFiles PROPERTIES TIMEOUT 300 LABELS e2e)
foreach(_model fashion_mlp fashion_lenet fashion_resnet tiny_gpt)
  add_test(NAME Checkpoint.ToTorch.${_model}
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/ckpt_test.py --braid $<TARGET_FILE:braid>
                   --workdir ${CMAKE_BINARY_DIR}/ckpt_test/${_model} --run ${CMAKE_SOURCE_DIR}/configs/${_model}.yaml)
  set_tests_properties(Checkpoint.ToTorch.${_model} PROPERTIES SKIP_RETURN_CODE 77 LABELS "torch;e2e" TIMEOUT 600)
endforeach()
# A tied head (linear's `tie`): one tensor in the checkpoint, both names (one storage) in the PyTorch state_dict.
add_test(NAME Checkpoint.ToTorch.tied_gpt
         COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/ckpt_test.py --braid $<TARGET_FILE:braid>
                 --workdir ${CMAKE_BINARY_DIR}/ckpt_test/tied_gpt --run ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/tied_gpt.yaml
                 --tied logits.weight=tok.weight)
set_tests_properties(Checkpoint.ToTorch.tied_gpt PROPERTIES SKIP_RETURN_CODE 77 LABELS "torch;e2e" TIMEOUT 600)

# Checkpoint.ExactResumeAndCrashSafety (tests/ckpt/resume_test.py): exact resume of fashion_lenet and tiny_gpt
# after a stop mid-epoch, SIGTERM, and 20 SIGKILL trials while checkpoints are written every step.
add_test(NAME Checkpoint.ExactResumeAndCrashSafety
         COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/resume_test.py $<TARGET_FILE:braid>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/ckpt_test --trials 20)
set_tests_properties(Checkpoint.ExactResumeAndCrashSafety PROPERTIES TIMEOUT 900 LABELS "e2e;slow")

# SameBits.Checkpoints.<cap> (scripts/same_bits.sh): 20 steps of each shipped model family at 1, 2 and 3 threads
# give the same checksums of every checkpoint tensor, natively and with braid, oneDNN and OpenBLAS capped to AVX2
# and to the baseline (docs/testing.md).
foreach(_cap native avx2 baseline)
  add_test(NAME SameBits.Checkpoints.${_cap}
           COMMAND ${CMAKE_SOURCE_DIR}/scripts/same_bits.sh --build ${CMAKE_BINARY_DIR} --caps ${_cap})
  set_tests_properties(SameBits.Checkpoints.${_cap} PROPERTIES LABELS e2e TIMEOUT 900)
endforeach()
