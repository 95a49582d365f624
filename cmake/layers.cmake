# The layering of docs/design.md ("Layers"), the one place it is written in code.
# OMNI_LAYER_DEPS_<layer> lists the layers <layer> may use. CMake links each layer's
# library to exactly these, and tests/layering checks every #include against them.
set(OMNI_LAYERS base config tensor model engine runtime media server cli)
set(OMNI_LAYER_DEPS_base "")
set(OMNI_LAYER_DEPS_config base)
set(OMNI_LAYER_DEPS_tensor base)
set(OMNI_LAYER_DEPS_model base config tensor)
set(OMNI_LAYER_DEPS_engine base config tensor model)
set(OMNI_LAYER_DEPS_runtime base config tensor model engine)
set(OMNI_LAYER_DEPS_media base)
set(OMNI_LAYER_DEPS_server base config model runtime media)
set(OMNI_LAYER_DEPS_cli base config tensor model engine runtime media server)
