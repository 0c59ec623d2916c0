# Acceptance test "single-device training equals PyTorch": for each shipped model, 20 optimizer steps of braid
# and of PyTorch (tests/torch_ref/train_ref.py, built generically from `braid check --json` and ops/*.py) from
# the same initial weights on the same generated batches, dropout off; every step's loss within 1e-4 relative.
# The shipped optimizers and schedules are kept: within their warmups fp32 rounding noise stays ~1e-7 relative
# over 20 steps, while at full learning rate (SGD 0.05-0.1, momentum 0.9, batch norm, random data) it grows
# chaotically past 1e-3 even between torch's own f32 and f64 runs. Skipped (77) without torch or h5py.
# Included from tests/CMakeLists.txt when the braid target exists.
set(_braid_train_ref_models fashion_mlp:16 fashion_lenet:16 fashion_resnet:16 tiny_gpt:8)
foreach(_entry IN LISTS _braid_train_ref_models)
  string(REPLACE ":" ";" _parts ${_entry})
  list(GET _parts 0 _model)
  list(GET _parts 1 _batch)
  add_test(NAME TrainMatchesPyTorch.${_model}
           COMMAND ${BRAID_PYTHON} ${CMAKE_SOURCE_DIR}/tests/torch_ref/train_ref.py
                   --braid $<TARGET_FILE:braid>
                   --run ${CMAKE_SOURCE_DIR}/configs/${_model}.yaml
                   --workdir ${CMAKE_BINARY_DIR}/train_ref/${_model}
                   --steps 20 --batch ${_batch})
  set_tests_properties(TrainMatchesPyTorch.${_model} PROPERTIES
                       SKIP_RETURN_CODE 77 LABELS "torch" TIMEOUT 600)
endforeach()
