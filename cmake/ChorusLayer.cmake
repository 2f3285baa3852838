# One library target per layer (folder). A layer's headers are reachable as "<folder>/x.hpp" only
# through its target: each target gets an include root of its own in the build tree (a folder
# holding one link to the source folder), never the whole source tree. So a file can include a
# layer's headers only if its target links that layer, and with PRIVATE links between layers the
# build refuses an include that runs against the layering (a strategy including actors/, a host
# app including core/).
# `folder` is the name the headers are included by; the files are in the current source folder
# (the layer's own folder, at the top of the tree; tests/testkit for the test kit).
function(chorus_layer_headers target folder)
  set(root ${CMAKE_BINARY_DIR}/layers/${folder})
  if(NOT EXISTS ${root}/${folder})
    file(MAKE_DIRECTORY ${root})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${root}/${folder} SYMBOLIC)
  endif()
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
endfunction()

# The public headers (include/chorus/), for every layer and for host apps.
function(chorus_public_headers target)
  get_target_property(type ${target} TYPE)
  set(scope PUBLIC)
  if(type STREQUAL "INTERFACE_LIBRARY")
    set(scope INTERFACE)
  endif()
  target_include_directories(${target} ${scope}
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endfunction()
