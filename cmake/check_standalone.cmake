# cmake -DROOT=<dir> [-DNO_INDEX=ON] -P check_standalone.cmake
# Fails when a file under ROOT cites a document kept outside the repository: the notes folder
# next to the checkout, its design and reference notes by name, or a section of "the reference".
# A reader of the repository cannot follow such a citation; what it pointed at belongs in docs/
# (docs/design.md, docs/models/). ROOT is a git checkout (its tracked files are read) or, with
# NO_INDEX, any folder. Prints every hit with file and line.
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<dir> [-DNO_INDEX=ON] -P check_standalone.cmake")
endif()
find_package(Git REQUIRED QUIET)

# Each name is split by a bracket expression so that this file does not cite what it forbids.
set(cited "[.][.]/shared" "shared/(reference|spec)" "DESIGN[.]md" "qwen[-]models" "vllm-omni[.]md"
          "z-image[.]md" "METHOD[.]md" "reference[ ]§")
list(JOIN cited "|" pattern)
set(index_flag "")
if(NO_INDEX)
  set(index_flag --no-index)
endif()
execute_process(COMMAND "${GIT_EXECUTABLE}" grep ${index_flag} -n -I -E "${pattern}"
                WORKING_DIRECTORY "${ROOT}" RESULT_VARIABLE status OUTPUT_VARIABLE hits ERROR_VARIABLE errors)
if(status EQUAL 1)
  message("standalone: no file cites a document outside the repository")
elseif(status EQUAL 0)
  string(REGEX MATCHALL "\n" newlines "${hits}")
  list(LENGTH newlines count)
  message("${hits}")
  message(FATAL_ERROR "standalone: ${count} line(s) cite documents outside the repository; "
                      "write what the reader needs into docs/ and cite that")
else()
  message(FATAL_ERROR "standalone: git grep failed in ${ROOT} (${status}): ${errors}")
endif()
