# FindTensorRT: TensorRT 10/11 runtime headers and libnvinfer, plus the CUDA runtime -> target TensorRT::nvinfer.
#
#   TENSORRT_ROOT   a TensorRT tar install (include/, lib/); otherwise the system (Debian/Ubuntu
#                   libnvinfer-dev, JetPack) is searched.
# Sets TensorRT_FOUND, TensorRT_VERSION and, when not found, TensorRT_NOT_FOUND_REASON.
set(TENSORRT_ROOT "$ENV{TENSORRT_ROOT}" CACHE PATH "TensorRT install folder (include/, lib/)")

find_path(TENSORRT_INCLUDE_DIR NvInferRuntime.h
    HINTS "${TENSORRT_ROOT}/include" PATH_SUFFIXES x86_64-linux-gnu aarch64-linux-gnu)
find_library(TENSORRT_LIBRARY NAMES nvinfer nvinfer_11 nvinfer_10
    HINTS "${TENSORRT_ROOT}/lib" "${TENSORRT_ROOT}/lib64" PATH_SUFFIXES x86_64-linux-gnu aarch64-linux-gnu)
find_package(CUDAToolkit QUIET)

set(TensorRT_FOUND FALSE)
set(TensorRT_NOT_FOUND_REASON "")
if(NOT TENSORRT_INCLUDE_DIR)
    set(TensorRT_NOT_FOUND_REASON "NvInferRuntime.h not found")
elseif(NOT TENSORRT_LIBRARY)
    set(TensorRT_NOT_FOUND_REASON "libnvinfer not found (headers in ${TENSORRT_INCLUDE_DIR})")
elseif(NOT CUDAToolkit_FOUND)
    set(TensorRT_NOT_FOUND_REASON "the CUDA toolkit (cuda_runtime_api.h, libcudart) was not found")
else()
    file(STRINGS "${TENSORRT_INCLUDE_DIR}/NvInferVersion.h" _v REGEX "^#define (NV_TENSORRT|TRT)_(MAJOR|MINOR|PATCH)(_ENTERPRISE)? [0-9]+")
    foreach(part MAJOR MINOR PATCH)
        set(_${part} "")
        foreach(line IN LISTS _v)
            if(line MATCHES "_${part}(_ENTERPRISE)? ([0-9]+)")
                set(_${part} "${CMAKE_MATCH_2}")
            endif()
        endforeach()
    endforeach()
    set(TensorRT_VERSION "${_MAJOR}.${_MINOR}.${_PATCH}")
    if(_MAJOR AND _MAJOR LESS 10)
        set(TensorRT_NOT_FOUND_REASON "TensorRT ${TensorRT_VERSION} is older than 10 (this code uses the TensorRT 10/11 API)")
    else()
        set(TensorRT_FOUND TRUE)
    endif()
endif()

if(TensorRT_FOUND AND NOT TARGET TensorRT::nvinfer)
    add_library(TensorRT::nvinfer SHARED IMPORTED)
    set_target_properties(TensorRT::nvinfer PROPERTIES
        IMPORTED_LOCATION "${TENSORRT_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${TENSORRT_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES CUDA::cudart)
endif()
