# The CUDA kernel instances: one row per kernel, naming the head-dim list of src/cuda/instances.hpp
# it is compiled for, its dtypes, and how one instance is declared. At configure time each row
# becomes one small .cu per (head dim, dtype) in ${PROJECT_BINARY_DIR}/cuda_instances/, named
# <family>_<kernel>_d<head dim>_<dtype>.cu (sm80_fwd_d128_bf16.cu), so that a 2-core build
# compiles them in parallel and a change recompiles only what it touches. A file is rewritten only
# when its text changes (rebuilds stay incremental), and files no row asks for any more are
# removed. The head dims come from instances.hpp, which the dispatchers compile, so the instances
# built and the instances called come from the same lines (docs/design.md, "Kernel instances").
#
# Each instance compiles for its family's targets only: sm80 rows for every target of
# FLASHPP_CUDA_ARCHS, sm90 rows for sm_90a (and not at all without 90a in the list).
#
# Included by CMakeLists.txt when the CUDA backend is built; it sets FLASHPP_CUDA_INSTANCE_SOURCES.

set(FLASHPP_CUDA_INSTANCE_DIR ${PROJECT_BINARY_DIR}/cuda_instances)
set(FLASHPP_CUDA_INSTANCE_SOURCES "")

# The head-dim lists, read from the `using <Name>HeadDims = HeadDims<d, d, ...>;` lines of
# instances.hpp into FLASHPP_HEAD_DIMS_<Name>. A line that starts like one but does not parse
# stops the configure rather than leave a list behind.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/instances.hpp)
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/instances.hpp _head_dim_lines REGEX "^using [A-Za-z0-9]*HeadDims =")
foreach(_line IN LISTS _head_dim_lines)
  if(NOT _line MATCHES "^using ([A-Za-z0-9]+)HeadDims = HeadDims< *([0-9]+( *, *[0-9]+)*) *>;")
    message(FATAL_ERROR "src/cuda/instances.hpp: cannot read the head-dim list '${_line}'")
  endif()
  string(REGEX REPLACE " *, *" ";" FLASHPP_HEAD_DIMS_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
endforeach()

# flashpp_cuda_instances(NAME <family>_<kernel> FAMILY sm80|sm90 HEAD_DIMS <list of instances.hpp>
#                        DTYPES fp16|bf16... HEADER <path under src/cuda> NAMESPACE <namespace>
#                        DESCRIPTION <what the kernel is, without semicolons>
#                        INSTANTIATE <explicit instantiation, @ELEMENT@ and @HEAD_DIM@ filled in>...)
function(flashpp_cuda_instances)
  cmake_parse_arguments(ARG "" "NAME;FAMILY;HEAD_DIMS;HEADER;NAMESPACE;DESCRIPTION"
                        "DTYPES;INSTANTIATE" ${ARGN})
  if(NOT DEFINED FLASHPP_HEAD_DIMS_${ARG_HEAD_DIMS})
    message(FATAL_ERROR "instances.cmake, ${ARG_NAME}: no ${ARG_HEAD_DIMS}HeadDims in instances.hpp")
  endif()
  if(ARG_FAMILY STREQUAL "sm80")
    set(gencode "${FLASHPP_GENCODE}")
  elseif(ARG_FAMILY STREQUAL "sm90")
    if(NOT "90a" IN_LIST FLASHPP_CUDA_ARCHS)
      return()
    endif()
    set(gencode "-gencode=arch=compute_90a,code=sm_90a")
  else()
    message(FATAL_ERROR "instances.cmake, ${ARG_NAME}: FAMILY is sm80 or sm90, got '${ARG_FAMILY}'")
  endif()
  set(sources "")
  foreach(HEAD_DIM IN LISTS FLASHPP_HEAD_DIMS_${ARG_HEAD_DIMS})
    foreach(dtype IN LISTS ARG_DTYPES)
      if(dtype STREQUAL "fp16")
        set(ELEMENT "__half")
      elseif(dtype STREQUAL "bf16")
        set(ELEMENT "__nv_bfloat16")
      else()
        message(FATAL_ERROR "instances.cmake, ${ARG_NAME}: DTYPES are fp16 or bf16, got '${dtype}'")
      endif()
      set(text "// ${ARG_DESCRIPTION}: head dim ${HEAD_DIM}, ${dtype}.\n")
      string(APPEND text "// Generated from src/cuda/instances.cmake and instances.hpp by CMake: edit those.\n")
      string(APPEND text "#include \"${ARG_HEADER}\"\n\nnamespace ${ARG_NAMESPACE} {\n")
      foreach(declaration IN LISTS ARG_INSTANTIATE)
        string(CONFIGURE "${declaration}" declaration @ONLY)
        string(APPEND text "${declaration};\n")
      endforeach()
      string(APPEND text "}  // namespace ${ARG_NAMESPACE}\n")
      set(file ${FLASHPP_CUDA_INSTANCE_DIR}/${ARG_NAME}_d${HEAD_DIM}_${dtype}.cu)
      file(CONFIGURE OUTPUT ${file} CONTENT "${text}" @ONLY)  # leaves an unchanged file untouched
      list(APPEND sources ${file})
    endforeach()
  endforeach()
  set_source_files_properties(${sources} PROPERTIES COMPILE_OPTIONS "${gencode}"
                              INCLUDE_DIRECTORIES ${PROJECT_SOURCE_DIR}/src/cuda)
  set(FLASHPP_CUDA_INSTANCE_SOURCES ${FLASHPP_CUDA_INSTANCE_SOURCES} ${sources} PARENT_SCOPE)
endfunction()

# ---- the table --------------------------------------------------------------------------------
flashpp_cuda_instances(NAME sm80_fwd FAMILY sm80 HEAD_DIMS Sm80Forward DTYPES fp16 bf16
  HEADER sm80/forward/launch.cuh NAMESPACE flashpp::cuda::sm80
  DESCRIPTION "The sm80 forward"
  INSTANTIATE "template void launch_forward<@ELEMENT@, @HEAD_DIM@>(const ForwardParams&, std::int64_t, cudaStream_t)")

flashpp_cuda_instances(NAME sm80_bwd_main FAMILY sm80 HEAD_DIMS Sm80Backward DTYPES fp16 bf16
  HEADER sm80/backward/launch_impl.cuh NAMESPACE flashpp::cuda::sm80
  DESCRIPTION "The sm80 backward's main kernel (dK, dV, and dQ by atomics)"
  INSTANTIATE "template void launch_main<@ELEMENT@, @HEAD_DIM@>(const BackwardParams&, bool, cudaStream_t)"
              "template BackwardParams prepare_main<@ELEMENT@, @HEAD_DIM@>(const BackwardParams&, bool)")

flashpp_cuda_instances(NAME sm80_bwd_dq FAMILY sm80 HEAD_DIMS Sm80Backward DTYPES fp16 bf16
  HEADER sm80/backward/launch_impl.cuh NAMESPACE flashpp::cuda::sm80
  DESCRIPTION "The sm80 backward's deterministic dQ kernel"
  INSTANTIATE "template void launch_dq<@ELEMENT@, @HEAD_DIM@>(const BackwardParams&, cudaStream_t)")

flashpp_cuda_instances(NAME sm80_decode FAMILY sm80 HEAD_DIMS Sm80Decode DTYPES fp16 bf16
  HEADER sm80/decode/launch.cuh NAMESPACE flashpp::cuda::decode
  DESCRIPTION "The decode kernels (split-KV, paged caches)"
  INSTANTIATE "template void launch_decode<@ELEMENT@, @HEAD_DIM@>(const DecodeParams&, cudaStream_t)")

flashpp_cuda_instances(NAME sm90_fwd FAMILY sm90 HEAD_DIMS Sm90Forward DTYPES fp16 bf16
  HEADER sm90/forward/launch.cuh NAMESPACE flashpp::cuda::sm90
  DESCRIPTION "The sm90 forward"
  INSTANTIATE "template void launch_forward<@ELEMENT@, @HEAD_DIM@>(const ForwardParams&, const detail::ForwardArgs&, cudaStream_t)")

flashpp_cuda_instances(NAME sm90_fwd_fp8 FAMILY sm90 HEAD_DIMS Sm90Fp8Forward DTYPES fp16 bf16
  HEADER sm90/forward_fp8/launch.cuh NAMESPACE flashpp::cuda::sm90::fp8
  DESCRIPTION "The sm90 FP8 forward (e4m3 inputs, the dtype is the output's)"
  INSTANTIATE "template void launch_forward_fp8<@ELEMENT@, @HEAD_DIM@>(const ForwardParams&, const detail::ForwardArgs&, cudaStream_t)")

flashpp_cuda_instances(NAME sm90_bwd FAMILY sm90 HEAD_DIMS Sm90Backward DTYPES fp16 bf16
  HEADER sm90/backward/launch.cuh NAMESPACE flashpp::cuda::sm90
  DESCRIPTION "The sm90 backward"
  INSTANTIATE "template void run_backward_for<@ELEMENT@, @HEAD_DIM@>(const BackwardParams&, const detail::BackwardArgs&, cudaStream_t)")
# ------------------------------------------------------------------------------------------------

# Files of rows or head dims since removed would otherwise linger (and mislead a reader).
file(GLOB _generated ${FLASHPP_CUDA_INSTANCE_DIR}/*.cu)
foreach(_file IN LISTS _generated)
  if(NOT _file IN_LIST FLASHPP_CUDA_INSTANCE_SOURCES)
    file(REMOVE ${_file})
  endif()
endforeach()
