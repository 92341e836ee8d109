# Cross build for 32-bit ARM Linux (hard float) against Debian's armhf libraries.
#   tools/deps.sh armhf
#   cmake -S . -B build-armhf -DCMAKE_TOOLCHAIN_FILE=toolchains/arm-linux-gnueabihf.cmake -DWITH_COORDINATOR=OFF
# tools/deps.sh armhf installs gcc-arm-linux-gnueabihf and qemu-user, and unpacks the agent's
# :armhf library packages (the -dev packages and their shared libraries, taken from the Debian
# archive with apt-get download) into a sysroot, /opt/rcs-sysroot/arm-linux-gnueabihf by default
# (RCS_SYSROOT overrides it). Unpacking instead of installing them as multiarch packages keeps the
# build working when the armhf and amd64 indexes of a mirror disagree on a shared library's version.
# If the libraries are installed as multiarch packages instead (/usr/lib/arm-linux-gnueabihf),
# that works too. Run the result with qemu-user:
#   qemu-arm -L /usr/arm-linux-gnueabihf \
#     -E LD_LIBRARY_PATH=/usr/arm-linux-gnueabihf/lib:/opt/rcs-sysroot/arm-linux-gnueabihf/usr/lib/arm-linux-gnueabihf \
#     build-armhf/bin/rcs-agent --help
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(RCS_TRIPLET arm-linux-gnueabihf)
set(CMAKE_C_COMPILER ${RCS_TRIPLET}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${RCS_TRIPLET})

if(DEFINED ENV{RCS_SYSROOT})
  set(RCS_SYSROOT "$ENV{RCS_SYSROOT}" CACHE PATH "unpacked armhf libraries")
else()
  set(RCS_SYSROOT "/opt/rcs-sysroot/${RCS_TRIPLET}" CACHE PATH "unpacked armhf libraries")
endif()
set(RCS_TARGET_LIBDIR /usr/lib/${RCS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH /usr/${RCS_TRIPLET} /usr/lib/${RCS_TRIPLET})
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${RCS_TRIPLET}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
if(EXISTS "${RCS_SYSROOT}/usr/lib/${RCS_TRIPLET}")
  set(RCS_TARGET_LIBDIR ${RCS_SYSROOT}/usr/lib/${RCS_TRIPLET})
  list(PREPEND CMAKE_FIND_ROOT_PATH ${RCS_SYSROOT})
  set(ENV{PKG_CONFIG_LIBDIR} ${RCS_SYSROOT}/usr/lib/${RCS_TRIPLET}/pkgconfig)
  set(ENV{PKG_CONFIG_SYSROOT_DIR} ${RCS_SYSROOT})
  # the cross compiler's own C library stays in /usr/arm-linux-gnueabihf; the unpacked headers
  # and libraries come after it, and the linker resolves their dependencies there
  set(CMAKE_C_FLAGS_INIT
    "-isystem ${RCS_SYSROOT}/usr/include/${RCS_TRIPLET} -isystem ${RCS_SYSROOT}/usr/include")
  set(CMAKE_EXE_LINKER_FLAGS_INIT
    "-L${RCS_TARGET_LIBDIR} -Wl,-rpath-link,${RCS_TARGET_LIBDIR}")
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config must read the target's .pc files, not the build machine's
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_CROSSCOMPILING_EMULATOR
  qemu-arm;-L;/usr/${RCS_TRIPLET};-E;LD_LIBRARY_PATH=/usr/${RCS_TRIPLET}/lib:${RCS_TARGET_LIBDIR})
