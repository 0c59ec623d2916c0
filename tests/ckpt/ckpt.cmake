# Checkpoint tests through the braid command: exact resume, SIGTERM, SIGKILL crash trials.
add_test(NAME Checkpoint.ExactResumeAndCrashSafety
         COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ckpt/resume_test.py $<TARGET_FILE:braid>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/ckpt_test --trials 20)
set_tests_properties(Checkpoint.ExactResumeAndCrashSafety PROPERTIES TIMEOUT 900)
