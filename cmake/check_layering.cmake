# cmake -DROOT=<dir with src/> -P check_layering.cmake
# Fails when a file in src/<layer>/ includes a header of a layer that cmake/layers.cmake does not
# allow <layer> to use. Prints every violation with file and line.
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<dir> -P check_layering.cmake")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/layers.cmake)

set(violations 0)
foreach(layer IN LISTS OMNI_LAYERS)
  file(GLOB_RECURSE files "${ROOT}/src/${layer}/*.h" "${ROOT}/src/${layer}/*.cc" "${ROOT}/src/${layer}/*.cu"
       "${ROOT}/src/${layer}/*.cuh")
  set(allowed ${layer} ${OMNI_LAYER_DEPS_${layer}})
  foreach(file IN LISTS files)
    file(STRINGS "${file}" lines)
    set(line_no 0)
    foreach(line IN LISTS lines)
      math(EXPR line_no "${line_no} + 1")
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([a-z_]+)/")
        set(target "${CMAKE_MATCH_1}")
        if(target IN_LIST OMNI_LAYERS AND NOT target IN_LIST allowed)
          file(RELATIVE_PATH rel "${ROOT}" "${file}")
          message("${rel}:${line_no}: layer '${layer}' includes '${target}/', "
                  "but may only use: ${OMNI_LAYER_DEPS_${layer}}")
          math(EXPR violations "${violations} + 1")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "layering: ${violations} violation(s) of cmake/layers.cmake")
endif()
message("layering: every include respects cmake/layers.cmake")
