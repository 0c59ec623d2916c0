# End-to-end tests through the braid binary (Python drivers run with Debian's python3).
if(TARGET braid)
  add_test(NAME Cli.EndToEnd
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/cli_test.py $<TARGET_FILE:braid>
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/cli_test)
  set_tests_properties(Cli.EndToEnd PROPERTIES TIMEOUT 900 LABELS e2e)
  add_test(NAME Cli.BadInputCorpus
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/bad_corpus.py $<TARGET_FILE:braid>
                   ${CMAKE_CURRENT_SOURCE_DIR}/bad)
  set_tests_properties(Cli.BadInputCorpus PROPERTIES TIMEOUT 600 LABELS e2e)
  add_test(NAME Cli.Diagnostics
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/diagnostics_test.py $<TARGET_FILE:braid>
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/diagnostics_test)
  set_tests_properties(Cli.Diagnostics PROPERTIES TIMEOUT 600 LABELS e2e)
  # Issue 39: braid tokenize and the tokens data format, the README's steps and their refusals.
  add_test(NAME Cli.Tokenize
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/tokenize_test.py $<TARGET_FILE:braid>
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/tokenize_test)
  set_tests_properties(Cli.Tokenize PROPERTIES TIMEOUT 300 LABELS e2e)
  # Issue 42: hostile model and run files (names of any length, 100,000-long var chains, C1 names), each refused
  # within 512 MiB and a time bound: 2 s asked, 4 s here so that a loaded machine does not fail it.
  add_test(NAME Cli.HostileModels
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/hostile_models_test.py $<TARGET_FILE:braid>
                   ${CMAKE_BINARY_DIR}/hostile_models_test --max-seconds 3 --max-rss-mib 512)
  set_tests_properties(Cli.HostileModels PROPERTIES TIMEOUT 300 LABELS e2e)
endif()
# The benchmark sweep script end to end, tiny: a one-device row (no prediction) beside a cpu:2 row (predicted);
# sweep.sh prints each row from bench's CSV and plot.py draws both panels and the predicted plot.
if(TARGET braid)
  add_test(NAME Bench.SweepScript
           COMMAND bash -c "BRAID=$<TARGET_FILE:braid> ${CMAKE_SOURCE_DIR}/scripts/bench/sweep.sh ${CMAKE_SOURCE_DIR}/configs/bench/mlp.yaml --sweep devices=cpu,cpu:2 --steps 2 --warmup 1 --window 1 --out ${CMAKE_BINARY_DIR}/bench_sweep_test && ${BRAID_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/bench/plot.py predicted ${CMAKE_BINARY_DIR}/bench_sweep_test/sweep.csv -o ${CMAKE_BINARY_DIR}/bench_sweep_test/predicted.png")
  set_tests_properties(Bench.SweepScript PROPERTIES TIMEOUT 300 LABELS "bench;e2e")
endif()
# CUDA builds: the CUDA backend is a module that only cuda runs load (tests/cli/cuda_module_test.py).
if(TARGET braid AND TARGET braid_cuda)
  add_test(NAME Cli.CudaModuleLoadedOnlyForCuda
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/cuda_module_test.py $<TARGET_FILE:braid>
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/cuda_module_test)
  set_tests_properties(Cli.CudaModuleLoadedOnlyForCuda PROPERTIES TIMEOUT 300 LABELS e2e)
endif()
