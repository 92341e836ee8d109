# Unit and escape tests of the script jail (agent/sandbox.c): real forks,
# seccomp and watchdog, no MQTT. include()d by tests/unit/CMakeLists.txt
# (rcs_unit_test: warnings, cmocka, add_test unit.test_sandbox).
# Runs in about 25 s; under valgrind set RCS_UNDER_VALGRIND=1 (see the test).
rcs_unit_test(test_sandbox ${CMAKE_CURRENT_LIST_DIR}/test_sandbox.c)
target_link_libraries(test_sandbox PRIVATE rcs_agent_core)
