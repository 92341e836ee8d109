# Unit tests of agent/journal.c, agent/verify.c, and settings.c, runner.c and link.c
# (test_agent_parts), artifact.c and fetch.c (test_artifact). include()d by
# tests/unit/CMakeLists.txt (rcs_unit_test: cmocka, warnings, RCS_VECTORS_DIR).
# test_journal's full-disk case mounts a small tmpfs in a private mount
# namespace and is skipped where that is not allowed (not root).
if(TARGET rcs_agent_core)
  rcs_unit_test(test_journal ${CMAKE_CURRENT_LIST_DIR}/test_journal.c)
  target_link_libraries(test_journal PRIVATE rcs_agent_core)
  rcs_unit_test(test_verify ${CMAKE_CURRENT_LIST_DIR}/test_verify.c)
  target_link_libraries(test_verify PRIVATE rcs_agent_core)
  rcs_unit_test(test_agent_parts ${CMAKE_CURRENT_LIST_DIR}/test_agent_parts.c)
  target_link_libraries(test_agent_parts PRIVATE rcs_agent_core)
  rcs_unit_test(test_artifact ${CMAKE_CURRENT_LIST_DIR}/test_artifact.c)
  target_link_libraries(test_artifact PRIVATE rcs_agent_core)
endif()
