# The shape every cross toolchain file here shares: Debian's cross compiler for RCS_TRIPLET, and
# a sysroot holding the target's C library and the agent's libraries, unpacked from the target's
# Debian packages (tools/deps.sh makes it; docs/agent.md, "Cross-compiling", says how to make
# one by hand). Nothing of the target is installed as a multiarch package.
#
# The including file sets CMAKE_SYSTEM_PROCESSOR, RCS_TRIPLET and RCS_QEMU. The sysroot is
#   -DRCS_SYSROOT=<dir>                    if given, else
#   $RCS_SYSROOT_DIR/<triplet>             if the environment sets RCS_SYSROOT_DIR, else
#   /opt/rcs-sysroot/<triplet>             where tools/deps.sh puts it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${RCS_TRIPLET}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${RCS_TRIPLET})

if(NOT RCS_SYSROOT)
  if(DEFINED ENV{RCS_SYSROOT_DIR})
    set(RCS_SYSROOT "$ENV{RCS_SYSROOT_DIR}/${RCS_TRIPLET}")
  else()
    set(RCS_SYSROOT "/opt/rcs-sysroot/${RCS_TRIPLET}")
  endif()
endif()
set(RCS_SYSROOT "${RCS_SYSROOT}" CACHE PATH "sysroot of ${RCS_TRIPLET} (target's libc and libraries)")
# try_compile projects see the same sysroot
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES RCS_SYSROOT)

# The pieces a build needs from the sysroot: the C library with its start files and the agent's
# libraries' pkg-config files. Missing ones are named with the command that makes them.
foreach(f usr/lib/${RCS_TRIPLET}/crt1.o usr/lib/${RCS_TRIPLET}/libc.so
    usr/include/stdio.h usr/lib/${RCS_TRIPLET}/pkgconfig/json-c.pc)
  if(NOT EXISTS "${RCS_SYSROOT}/${f}")
    message(FATAL_ERROR "cross sysroot ${RCS_SYSROOT} has no ${f}: run tools/deps.sh test "
      "(or make the sysroot by hand as docs/agent.md, Cross-compiling, says; -DRCS_SYSROOT=<dir> "
      "names another one)")
  endif()
endforeach()

set(CMAKE_SYSROOT "${RCS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${RCS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config reads the target's .pc files only, and prefixes their paths with the sysroot
set(ENV{PKG_CONFIG_LIBDIR}
  "${RCS_SYSROOT}/usr/lib/${RCS_TRIPLET}/pkgconfig:${RCS_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${RCS_SYSROOT}")
# Target programs run under qemu-user with the sysroot's own loader and libraries.
set(CMAKE_CROSSCOMPILING_EMULATOR ${RCS_QEMU};-L;${RCS_SYSROOT})
