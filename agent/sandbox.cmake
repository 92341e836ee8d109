# The agent's script jail: agent/sandbox.c (agent side: watchdog, host
# services), agent/sandbox_wire.c (the frames and helpers both sides use),
# agent/sandbox_launcher.c (the single-threaded process that forks
# the children) and agent/sandbox_child.c (the forked child: Lua 5.4 behind
# seccomp).
# include()d by agent/CMakeLists.txt once rcs_agent_core exists; it uses
# common/canon.c from rcs_common for JSON responses.
pkg_check_modules(LUA REQUIRED IMPORTED_TARGET lua5.4)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)

target_sources(rcs_agent_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/sandbox.c
  ${CMAKE_CURRENT_LIST_DIR}/sandbox_wire.c
  ${CMAKE_CURRENT_LIST_DIR}/sandbox_launcher.c
  ${CMAKE_CURRENT_LIST_DIR}/sandbox_child.c)
target_link_libraries(rcs_agent_core PUBLIC PkgConfig::LUA PkgConfig::SECCOMP)
