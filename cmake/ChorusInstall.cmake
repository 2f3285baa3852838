# The installable package, in one place: `cmake --install build --prefix P` puts
#   P/include/chorus/*.hpp             the public headers (the layers' own headers stay out)
#   P/lib/libchorus_*.a                every layer's static library
#   P/bin/chorus-orchestrator          the multi-node daemon
#   P/bin/chorus-ctl                   flight recorders side by side
#   P/lib/cmake/chorus/                chorusConfig.cmake, its version file, the exported targets
#                                      (namespace chorus::) and FindCAF.cmake
#   P/lib/pkgconfig/chorus.pc          the same for pkg-config
# so that an outside project writes find_package(chorus) and links chorus::chorus, or uses
# `pkg-config --cflags --libs chorus`. tests/install/ checks both from outside the tree.
include(CMakePackageConfigHelpers)

set(CHORUS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/chorus)
set(CHORUS_LAYERS chorus_core chorus_strategies chorus_messages chorus_transport chorus_cuda chorus_engine chorus_observability chorus_mesh chorus_actors chorus_runtime
                  chorus_gradsync chorus_peer_actor)

# Host apps' headers need C++20; users of chorus::chorus get it without asking.
target_compile_features(chorus INTERFACE cxx_std_20)
target_compile_features(chorus_caf INTERFACE cxx_std_20)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/chorus DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
# The layers' include roots are BUILD_INTERFACE only (cmake/ChorusLayer.cmake), so the exported
# targets carry just the public include directory: chorus::chorus links every layer (LINK_ONLY)
# and shows none of their headers.
install(TARGETS chorus chorus_caf ${CHORUS_LAYERS} EXPORT chorusTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS chorus-orchestrator chorus-ctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT chorusTargets NAMESPACE chorus:: DESTINATION ${CHORUS_CMAKE_DIR})

# The config finds what the exported targets name (CAF::*, CapnProto::capnp, OpenSSL::SSL,
# Threads::Threads, with CUDA CUDA::cudart_static); Debian's libcaf-dev has no CMake config, so
# our FindCAF.cmake travels with it.
if(CHORUS_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)  # its variables live in cuda/'s scope; NCCL_LIBRARY is cached
  get_filename_component(CHORUS_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/chorusConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/chorusConfig.cmake
                              INSTALL_DESTINATION ${CHORUS_CMAKE_DIR})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/chorusConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/chorusConfig.cmake
              ${PROJECT_BINARY_DIR}/package/chorusConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${CHORUS_CMAKE_DIR})

# pkg-config: Requires names what pkg-config knows (capnp brings kj; openssl brings ssl and
# crypto); CAF, the CUDA runtime and NCCL have no .pc file, so they go into Libs. Static
# libraries, so the layers are listed users first: peer_actor, gradsync, runtime, actors, mesh,
# observability, engine, cuda, transport, messages, strategies, core.
function(chorus_pc_libdir_flag out lib)
  get_filename_component(dir "${lib}" DIRECTORY)
  if(dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(${out} "" PARENT_SCOPE)
  else()
    set(${out} "-L${dir} -Wl,-rpath,${dir} " PARENT_SCOPE)
  endif()
endfunction()

set(CHORUS_PC_CFLAGS " -std=c++20")  # the public headers are C++20
if(NOT CAF_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
  string(APPEND CHORUS_PC_CFLAGS " -I${CAF_INCLUDE_DIR}")  # chorus/caf.hpp includes CAF
endif()
set(CHORUS_PC_LIBS "")
foreach(layer peer_actor gradsync runtime actors mesh observability engine cuda transport messages strategies core)
  string(APPEND CHORUS_PC_LIBS " -lchorus_${layer}")
endforeach()
chorus_pc_libdir_flag(caf_dir "${CAF_CORE_LIBRARY}")
string(APPEND CHORUS_PC_LIBS " ${caf_dir}-lcaf_openssl -lcaf_io -lcaf_core")
if(CHORUS_WITH_CUDA)
  # The CUDA layer registers the GPU memory of tensors from a static initializer: keep it linked.
  chorus_pc_libdir_flag(nccl_dir "${NCCL_LIBRARY}")
  string(APPEND CHORUS_PC_LIBS " -Wl,--undefined=chorus_cuda_layer -L${CUDAToolkit_LIBRARY_DIR}"
                               " -lcudart_static -ldl -lrt ${nccl_dir}-lnccl")
endif()
string(APPEND CHORUS_PC_LIBS " -pthread")
configure_file(${PROJECT_SOURCE_DIR}/cmake/chorus.pc.in ${PROJECT_BINARY_DIR}/package/chorus.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/chorus.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
