# The agent's journal (agent/journal.c, SQLite) and envelope checks
# (agent/verify.c). include()d by agent/CMakeLists.txt after it has made the
# rcs_agent_core library (which links rcs_common).
target_sources(rcs_agent_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/journal.c
  ${CMAKE_CURRENT_LIST_DIR}/verify.c)
target_include_directories(rcs_agent_core PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(rcs_agent_core PUBLIC rcs_db PkgConfig::SQLITE Threads::Threads)
