# Cross build for 32-bit ARM Linux (hard float) against Debian's multiarch libraries
# (tools/deps.sh armhf installs gcc-arm-linux-gnueabihf, the :armhf -dev packages and qemu-user).
#   cmake -S . -B build-armhf -DCMAKE_TOOLCHAIN_FILE=toolchains/arm-linux-gnueabihf.cmake -DWITH_COORDINATOR=OFF
# Run the result with qemu-user (the loader and libc of the cross sysroot must match):
#   qemu-arm -L /usr/arm-linux-gnueabihf -E LD_LIBRARY_PATH=/usr/arm-linux-gnueabihf/lib build-armhf/bin/rcs-agent --help
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(RCS_TRIPLET arm-linux-gnueabihf)
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
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm;-L;/usr/${RCS_TRIPLET};-E;LD_LIBRARY_PATH=/usr/${RCS_TRIPLET}/lib)
