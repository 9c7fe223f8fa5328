# FindOnnxRuntime: the ONNX Runtime C/C++ API headers and shared library -> target onnxruntime::onnxruntime.
#
# Looked for, in order:
#   ONNXRUNTIME_ROOT            an official release archive (include/, lib/libonnxruntime.so*)
#   ONNXRUNTIME_INCLUDE_DIR     the folder holding onnxruntime_cxx_api.h
#   ONNXRUNTIME_LIBRARY         libonnxruntime.so* itself
# and otherwise: headers put under <this project>/build/_deps/onnxruntime by
# scripts/fetch_debian_headers.sh, system headers (/usr/include/onnxruntime), and the library
# that the Python 'onnxruntime' wheel ships (onnxruntime/capi/libonnxruntime.so.<version>), found by
# asking VITDEPLOY_PYTHON (default: python3 on PATH).
#
# The wheel's library file carries only its full version in its name while its SONAME is
# libonnxruntime.so.1, so links with both names are made in the build folder and the programs get
# that folder in their RUNPATH.
include(FindPackageHandleStandardArgs)

set(ONNXRUNTIME_ROOT "" CACHE PATH "ONNX Runtime release folder (include/ and lib/)")
set(VITDEPLOY_PYTHON "" CACHE FILEPATH "Python interpreter whose onnxruntime wheel provides libonnxruntime")

find_path(ONNXRUNTIME_INCLUDE_DIR onnxruntime_cxx_api.h
    HINTS "${ONNXRUNTIME_ROOT}/include"
          "${CMAKE_BINARY_DIR}/_deps/onnxruntime/include"
          "${PROJECT_SOURCE_DIR}/build/_deps/onnxruntime/include"
    PATH_SUFFIXES onnxruntime onnxruntime/core/session)

if(NOT ONNXRUNTIME_LIBRARY AND ONNXRUNTIME_ROOT)
    find_library(ONNXRUNTIME_LIBRARY NAMES onnxruntime HINTS "${ONNXRUNTIME_ROOT}/lib" NO_DEFAULT_PATH)
endif()
set(_ort_from_wheel FALSE)
if(NOT ONNXRUNTIME_LIBRARY)
    set(_python "${VITDEPLOY_PYTHON}")
    if(NOT _python)
        find_program(_python NAMES python3 python)
    endif()
    if(_python)
        execute_process(
            COMMAND "${_python}" -c "import onnxruntime, os; print(os.path.join(os.path.dirname(onnxruntime.__file__), 'capi'))"
            OUTPUT_VARIABLE _capi OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
        if(_rc EQUAL 0 AND IS_DIRECTORY "${_capi}")
            file(GLOB _ort_libs "${_capi}/libonnxruntime.so.*" "${_capi}/libonnxruntime.*.dylib")
            if(_ort_libs)
                list(SORT _ort_libs)
                list(GET _ort_libs -1 _ort_real)
                set(_ort_from_wheel TRUE)
            endif()
        endif()
    endif()
    if(_ort_from_wheel)
        set(_linkdir "${CMAKE_BINARY_DIR}/onnxruntime-lib")
        file(MAKE_DIRECTORY "${_linkdir}")
        file(CREATE_LINK "${_ort_real}" "${_linkdir}/libonnxruntime.so.1" SYMBOLIC)
        file(CREATE_LINK "${_ort_real}" "${_linkdir}/libonnxruntime.so" SYMBOLIC)
        set(ONNXRUNTIME_LIBRARY "${_linkdir}/libonnxruntime.so" CACHE FILEPATH "ONNX Runtime shared library" FORCE)
        set(ONNXRUNTIME_LIBRARY_SOURCE "${_ort_real}")
    else()
        find_library(ONNXRUNTIME_LIBRARY NAMES onnxruntime)
    endif()
endif()
if(ONNXRUNTIME_LIBRARY AND NOT ONNXRUNTIME_LIBRARY_SOURCE)
    get_filename_component(ONNXRUNTIME_LIBRARY_SOURCE "${ONNXRUNTIME_LIBRARY}" REALPATH)
endif()

# Header API version vs library version: the C API is backward compatible only (old program, new library).
if(ONNXRUNTIME_INCLUDE_DIR AND EXISTS "${ONNXRUNTIME_INCLUDE_DIR}/onnxruntime_c_api.h")
    file(STRINGS "${ONNXRUNTIME_INCLUDE_DIR}/onnxruntime_c_api.h" _api REGEX "^#define ORT_API_VERSION [0-9]+")
    string(REGEX REPLACE ".* ([0-9]+)$" "\\1" OnnxRuntime_API_VERSION "${_api}")
endif()
if(ONNXRUNTIME_LIBRARY_SOURCE MATCHES "onnxruntime\\.so\\.([0-9]+)\\.([0-9]+)\\.([0-9]+)$")
    set(OnnxRuntime_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}.${CMAKE_MATCH_3}")
    if(OnnxRuntime_API_VERSION AND CMAKE_MATCH_2 LESS OnnxRuntime_API_VERSION)
        message(FATAL_ERROR "ONNX Runtime library ${OnnxRuntime_VERSION} (${ONNXRUNTIME_LIBRARY_SOURCE}) is older than its headers "
                            "(C API version ${OnnxRuntime_API_VERSION} in ${ONNXRUNTIME_INCLUDE_DIR}): use headers of the same "
                            "or an older release, or a newer library")
    endif()
endif()

find_package_handle_standard_args(OnnxRuntime
    REQUIRED_VARS ONNXRUNTIME_LIBRARY ONNXRUNTIME_INCLUDE_DIR
    VERSION_VAR OnnxRuntime_VERSION
    REASON_FAILURE_MESSAGE "headers: run cpp/scripts/fetch_debian_headers.sh or pass -DONNXRUNTIME_INCLUDE_DIR, library: pip install onnxruntime (and pass -DVITDEPLOY_PYTHON=/path/to/that/python) or pass -DONNXRUNTIME_LIBRARY / -DONNXRUNTIME_ROOT")

if(OnnxRuntime_FOUND AND NOT TARGET onnxruntime::onnxruntime)
    add_library(onnxruntime::onnxruntime SHARED IMPORTED)
    set_target_properties(onnxruntime::onnxruntime PROPERTIES
        IMPORTED_LOCATION "${ONNXRUNTIME_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${ONNXRUNTIME_INCLUDE_DIR}")
endif()
