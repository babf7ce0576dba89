# install.cmake - the shared library and `cmake --install build --prefix P`:
#   lib/librelattn.so.X.Y.Z (soname librelattn.so.X), lib/librelattn.a,
#   include/relattn.h, bin/relattn, lib/pkgconfig/relattn.pc,
#   lib/cmake/relattn/ (find_package(relattn) -> relattn::relattn, and
#   relattn::relattn_static).
# Users need relattn.h alone: jansson, OpenBLAS, OpenMP, zlib, libspng,
# libjpeg and minizip are private (linked into the shared library; listed
# for static linking in Libs.private / Requires.private and
# relattn::relattn_static).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The header names the version too; the two must agree.
file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/include/relattn.h _ra_version_line
     REGEX "^#define RA_VERSION_STRING ")
if(NOT _ra_version_line MATCHES "\"${PROJECT_VERSION}\"")
  message(FATAL_ERROR "include/relattn.h: ${_ra_version_line} is not project VERSION ${PROJECT_VERSION}")
endif()

# The shared library: every object of the static one, only the ra_ names
# exported (cmake/relattn.map).
add_library(relattn_shared SHARED cmake/empty.c)
target_link_libraries(relattn_shared PRIVATE "-Wl,--whole-archive" relattn "-Wl,--no-whole-archive"
                      "-Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/cmake/relattn.map")
set_target_properties(relattn_shared PROPERTIES
  OUTPUT_NAME relattn VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cmake/relattn.map)
target_include_directories(relattn_shared INTERFACE
  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

install(TARGETS relattn_shared relattn_cli
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS relattn ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/relattn.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# pkg-config: relocatable (the prefix is found from the .pc file's place).
set(_ra_up "\${pcfiledir}/..")
string(REPLACE "/" ";" _ra_parts "${CMAKE_INSTALL_LIBDIR}")
foreach(_p IN LISTS _ra_parts)
  string(APPEND _ra_up "/..")
endforeach()
set(RA_PC_PREFIX "${_ra_up}")
# FFmpeg's libraries are not linked: src/io/video.c opens them at the first
# video (dlopen).
set(RA_PC_LIBS_PRIVATE "${OpenMP_C_FLAGS} -ldl -lm")
configure_file(cmake/relattn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/relattn.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/relattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The CMake package.
set(RA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/relattn)
configure_package_config_file(cmake/relattnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/relattnConfig.cmake INSTALL_DESTINATION ${RA_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/relattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/relattnConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/relattnConfigVersion.cmake
        DESTINATION ${RA_CMAKE_DIR})

# The test: install into a temporary prefix, then build and run the example
# of examples/c through pkg-config and through find_package. (Not under the
# sanitizers: the example is built without them.)
if(RELATTN_TESTS AND NOT RELATTN_SANITIZE AND NOT RELATTN_TSAN AND NOT RELATTN_FUZZ)
  add_test(NAME test_install COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_install.sh
           ${CMAKE_CURRENT_BINARY_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
endif()

# The Python package over the shared library (not under the sanitizers:
# Python would have to preload their runtimes).
if(RELATTN_TESTS AND NOT RELATTN_SANITIZE AND NOT RELATTN_TSAN AND NOT RELATTN_FUZZ)
  add_test(NAME test_python COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_python.sh
           $<TARGET_FILE:relattn_cli> ${CMAKE_CURRENT_SOURCE_DIR}/tests/fixtures
           ${CMAKE_CURRENT_SOURCE_DIR} $<TARGET_FILE:relattn_shared>)
  set_tests_properties(test_python PROPERTIES SKIP_RETURN_CODE 77)
  # The tests in Python (Debian's /usr/bin/python3, whose NumPy, PIL and
  # PyTorch they use, through ctypes on the shared library): each exits 77,
  # skipped, without what it needs.
  set(RA_SRC ${CMAKE_CURRENT_SOURCE_DIR})
  function(relattn_python_test name script)
    add_test(NAME ${name} COMMAND /usr/bin/python3 ${RA_SRC}/tests/${script} ${ARGN})
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77
                         ENVIRONMENT RELATTN_LIBRARY=$<TARGET_FILE:relattn_shared>)
  endfunction()
  # images in as each family reads them, against PIL (PIL, NumPy and
  # python3-skimage's photos)
  relattn_python_test(test_transform test_transform.py $<TARGET_FILE:relattn_cli>
                      ${RA_SRC}/tests/fixtures ${RA_SRC}/python)
  # videos: the clip samplers against their formulas (NumPy) and torchvision's
  # VideoClips, the frame transform and whole clips against torchvision's
  # VideoClassification, classify on a video against the swin3d twin (PyTorch and
  # the ffmpeg command; those parts skipped without)
  relattn_python_test(test_video_py test_video.py ${RA_SRC}/python $<TARGET_FILE:relattn_cli>
                      ${RA_SRC}/tools)
  # timm's RandAugment: each operation against PIL's bytes, the parsing and the draws
  relattn_python_test(test_augment test_augment.py ${RA_SRC}/python)
  # the training loader against PIL's pipeline and timm's draws; train --augment
  # timm and --init end to end
  relattn_python_test(test_loader_pil test_loader.py ${RA_SRC}/python $<TARGET_FILE:relattn_cli>)
  # the Video Swin network (swin3d) against its PyTorch twin: forward, backward,
  # both naming schemes, .pth and safetensors, precisions, the CLI (PyTorch)
  relattn_python_test(test_swin3d_net_torch test_swin3d_net.py $<TARGET_FILE:relattn_cli>
                      ${RA_SRC}/tools ${RA_SRC}/tests/fixtures)
  set_tests_properties(test_swin3d_net_torch PROPERTIES TIMEOUT 900)
  # timm's Mixup / CutMix and SoftTargetCrossEntropy against a PyTorch twin
  relattn_python_test(test_mixup_torch test_mixup.py ${RA_SRC}/python)
  # relattn train --init against torch.optim.AdamW on torchvision's swin_t,
  # swin_v2_t and vit_b_16 (PyTorch and torchvision)
  relattn_python_test(test_finetune test_finetune.py $<TARGET_FILE:relattn_cli> ${RA_SRC}/python)
  set_tests_properties(test_finetune PROPERTIES TIMEOUT 1500)
  # --drop-path, --layer-decay, --accum against PyTorch with relattn's masks and
  # the authors' parameter groups; --table-resize timm against timm's resize;
  # --arch's sizes against torchvision's builders (PyTorch and torchvision)
  relattn_python_test(test_finetune_opts test_finetune_opts.py $<TARGET_FILE:relattn_cli>
                      ${RA_SRC}/python)
  set_tests_properties(test_finetune_opts PROPERTIES TIMEOUT 900)
  # the feature maps of swin, swinv2, swin3d and vit (forward --features,
  # Model.features) against the twins and torchvision's own networks, stage by stage
  relattn_python_test(test_features_torch test_features.py $<TARGET_FILE:relattn_cli>
                      ${RA_SRC}/python)
  set_tests_properties(test_features_torch PROPERTIES TIMEOUT 600)
  # the ```bash blocks of README.md and docs/*.md, as written
  add_test(NAME test_readme COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_readme.sh
           ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR})
endif()
