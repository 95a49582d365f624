# The layering of docs/design.md ("Layers"), the one place it is written in code.
# OMNI_LAYER_DEPS_<layer> lists the layers <layer> may use. CMake links each layer's
# library to exactly these, and tests/layering checks every #include against them.
set(OMNI_LAYERS base config tensor text model engine runtime media server hub cli)
set(OMNI_LAYER_DEPS_base "")
set(OMNI_LAYER_DEPS_config base)
set(OMNI_LAYER_DEPS_tensor base)
set(OMNI_LAYER_DEPS_text base)
set(OMNI_LAYER_DEPS_model base config tensor text)
set(OMNI_LAYER_DEPS_engine base config tensor text model)
set(OMNI_LAYER_DEPS_runtime base config tensor text model engine)
set(OMNI_LAYER_DEPS_media base)
set(OMNI_LAYER_DEPS_server base config text runtime media)
# The Hugging Face Hub client (downloads and the shared cache): only the CLI uses it.
set(OMNI_LAYER_DEPS_hub base)
set(OMNI_LAYER_DEPS_cli base config tensor text model engine runtime media server hub)
