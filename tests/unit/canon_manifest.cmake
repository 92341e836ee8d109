# Unit tests of common/canon.c (RFC 8785) and common/manifest.c (signature
# manifest, base64, ES256). include()d by tests/unit/CMakeLists.txt, which has
# already run pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka) and set
# RCS_VECTORS_DIR to the shared test vectors (tests/vectors).
# test_manifest runs the openssl CLI to make keys and cross-check signatures;
# those cases are skipped when openssl is not installed.
if(NOT DEFINED RCS_VECTORS_DIR)
  set(RCS_VECTORS_DIR ${PROJECT_SOURCE_DIR}/tests/vectors)
endif()

foreach(rcs_t test_canon test_manifest)
  if(COMMAND rcs_unit_test)
    # the includer's helper: warnings, cmocka, RCS_VECTORS_DIR, add_test unit.<name>
    rcs_unit_test(${rcs_t} ${CMAKE_CURRENT_LIST_DIR}/${rcs_t}.c)
  else()
    add_executable(${rcs_t} ${CMAKE_CURRENT_LIST_DIR}/${rcs_t}.c)
    target_link_libraries(${rcs_t} PRIVATE PkgConfig::CMOCKA)
    target_compile_definitions(${rcs_t} PRIVATE RCS_VECTORS_DIR="${RCS_VECTORS_DIR}")
    add_test(NAME unit.${rcs_t} COMMAND ${rcs_t})
    set_tests_properties(unit.${rcs_t} PROPERTIES LABELS unit TIMEOUT 120)
  endif()
  target_link_libraries(${rcs_t} PRIVATE rcs_common)
endforeach()
