# Cross build for 64-bit ARM Linux against Debian's multiarch libraries
# (tools/deps.sh test installs gcc-aarch64-linux-gnu, the :arm64 -dev packages and qemu-user).
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=toolchains/aarch64-linux-gnu.cmake -DWITH_COORDINATOR=OFF
# Run the result with qemu-user (the loader and libc of the cross sysroot must match):
#   qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib build-aarch64/bin/rcs-agent --help
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(RCS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${RCS_TRIPLET}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${RCS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH /usr/${RCS_TRIPLET} /usr/lib/${RCS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config must read the target's .pc files, not the build machine's
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${RCS_TRIPLET}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/usr/${RCS_TRIPLET};-E;LD_LIBRARY_PATH=/usr/${RCS_TRIPLET}/lib)
