# End-to-end tests through the braid binary (Python drivers run with Debian's python3).
if(TARGET braid)
  add_test(NAME Cli.EndToEnd
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/cli_test.py $<TARGET_FILE:braid>
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/cli_test)
  set_tests_properties(Cli.EndToEnd PROPERTIES TIMEOUT 900)
  add_test(NAME Cli.BadInputCorpus
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/bad_corpus.py $<TARGET_FILE:braid>
                   ${CMAKE_CURRENT_SOURCE_DIR}/bad)
  set_tests_properties(Cli.BadInputCorpus PROPERTIES TIMEOUT 600)
  add_test(NAME Cli.Diagnostics
           COMMAND ${BRAID_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/diagnostics_test.py $<TARGET_FILE:braid>
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/diagnostics_test)
  set_tests_properties(Cli.Diagnostics PROPERTIES TIMEOUT 600)
endif()
