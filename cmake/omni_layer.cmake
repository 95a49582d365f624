# omni_layer(<layer> SOURCES ... [LIBS ...])
# Builds src/<layer> as the static library omni_<layer>, linked to the layers that
# cmake/layers.cmake allows it to use and to nothing above it.
function(omni_layer layer)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  set(target omni_${layer})
  # A layer with no code yet is an interface library, so that the layers above can already
  # name it in their links.
  if(ARG_SOURCES)
    add_library(${target} STATIC ${ARG_SOURCES})
    set(scope PUBLIC)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  endif()
  target_include_directories(${target} ${scope} ${PROJECT_SOURCE_DIR}/src ${PROJECT_BINARY_DIR}/generated)
  # The fuzz build links each fuzz target to the layers it names (tests/fuzz), not to everything
  # below them: a parser's fuzzer then compiles none of the model code the server sits on.
  if(NOT OMNI_FUZZ)
    foreach(dep IN LISTS OMNI_LAYER_DEPS_${layer})
      target_link_libraries(${target} ${scope} omni_${dep})
    endforeach()
  endif()
  if(ARG_LIBS)
    target_link_libraries(${target} ${scope} ${ARG_LIBS})
  endif()
endfunction()

# omni_test(<name> SOURCES ... LIBS ... [LABEL unit|integration])
function(omni_test name)
  cmake_parse_arguments(ARG "" "LABEL" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_LABEL)
    set(ARG_LABEL unit)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    OMNI_SOURCE_DIR="${PROJECT_SOURCE_DIR}" OMNI_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} PROPERTIES LABELS ${ARG_LABEL} DISCOVERY_TIMEOUT 60)
endfunction()
