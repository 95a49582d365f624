# cmake -DROOT=<dir with src/> -P check_family_free.cmake
# The rule of docs/architecture.md ("A model family lives in one folder"): src/runtime/ and
# src/engine/ hold no model-family code. Fails when a file there (its path or any line) names a
# family or one of its stage roles: qwen, talker, code2wav or codec, in any case — the same
# check as `grep -rilE 'qwen|talker|code2wav|codec' src/runtime src/engine`. Prints every
# offending file and line.
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<dir> -P check_family_free.cmake")
endif()

get_filename_component(ROOT "${ROOT}" ABSOLUTE)
set(pattern "qwen|talker|code2wav|codec")
set(violations 0)
foreach(dir runtime engine)
  file(GLOB_RECURSE files "${ROOT}/src/${dir}/*")
  foreach(file IN LISTS files)
    file(RELATIVE_PATH rel "${ROOT}" "${file}")
    string(TOLOWER "${rel}" rel_lower)
    if(rel_lower MATCHES "${pattern}")
      message("${rel}: the file's name names a model family (${CMAKE_MATCH_0})")
      math(EXPR violations "${violations} + 1")
    endif()
    file(STRINGS "${file}" lines)
    set(line_no 0)
    foreach(line IN LISTS lines)
      math(EXPR line_no "${line_no} + 1")
      string(TOLOWER "${line}" lower)
      if(lower MATCHES "${pattern}")
        message("${rel}:${line_no}: names a model family (${CMAKE_MATCH_0}): ${line}")
        math(EXPR violations "${violations} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "family rule: ${violations} place(s) in src/runtime or src/engine name a model family; "
                      "family code belongs in src/model/<family>/ (docs/architecture.md)")
endif()
message("family rule: src/runtime and src/engine name no model family")
