// The playground page (src/server/playground/playground.html): one self-contained HTML file, its
// CSS and JavaScript inline, compiled into the binary by cmake/embed_file.cmake.
#pragma once

#include <string_view>

namespace omni::server {

std::string_view playground_page();

}  // namespace omni::server
