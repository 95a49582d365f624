#include "cli/app.h"

int main(int argc, char** argv) { return omni::cli::run(argc, argv); }
