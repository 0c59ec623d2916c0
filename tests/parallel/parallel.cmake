# Data parallelism on cpu:N end to end through the braid binary (tests/parallel/dp_test.py, Debian's python3
# with h5py): fashion_mlp and tiny_gpt on cpu, cpu:2, cpu:4 agree within 1e-5; cpu:2 is deterministic;
# fashion_lenet (per-device batch norm) trains deterministically; an indivisible micro-batch exits 2.
# Included from tests/CMakeLists.txt when the braid target exists.
add_test(NAME Parallel.DataParallelAgrees
         COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/parallel/dp_test.py $<TARGET_FILE:braid>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/dp_test)
set_tests_properties(Parallel.DataParallelAgrees PROPERTIES TIMEOUT 900 LABELS "e2e;slow")
# Every parallel strategy (DP, TP, PP under each schedule, their mixes, an uneven cut) reproduces the
# single-device run; a checkpoint saved under DP2xPP2 resumes under TP2 and under one device
# (tests/parallel/strategies_test.py).
add_test(NAME Parallel.StrategiesAgree
         COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/parallel/strategies_test.py $<TARGET_FILE:braid>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/strategies_test)
set_tests_properties(Parallel.StrategiesAgree PROPERTIES TIMEOUT 900 LABELS "e2e;slow")
# Training across processes with braid launch on loopback: DP2, PP2 and DP2xPP2 (2 and 4 processes) equal the
# one-process run bit for bit; an elastic relaunch with fewer processes resumes; a killed rank stops the job
# (tests/parallel/processes_test.py).
add_test(NAME Parallel.ProcessesAgree
         COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/parallel/processes_test.py $<TARGET_FILE:braid>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/processes_test)
set_tests_properties(Parallel.ProcessesAgree PROPERTIES TIMEOUT 600 LABELS "dist;e2e;slow")
# A run that names one cpu device under braid launch --nproc 2 trains cpu:2, one device per process, with the
# losses of the one-process cpu:2 run (tests/parallel/launch_devices_test.py).
add_test(NAME Parallel.LaunchSpreadsOneCpuDevice
         COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/parallel/launch_devices_test.py $<TARGET_FILE:braid>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/launch_devices_test)
set_tests_properties(Parallel.LaunchSpreadsOneCpuDevice PROPERTIES TIMEOUT 600 LABELS "dist;e2e")
