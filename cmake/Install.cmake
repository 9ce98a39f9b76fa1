# `cmake --install BUILD --prefix P` installs the public headers, the libraries and
# lib/cmake/shardtopk/shardtopkConfig.cmake, so that another CMake project can write
#   find_package(shardtopk REQUIRED)
#   target_link_libraries(app PRIVATE shardtopk::shardtopk)
# (examples/cpp does). Skipped where a dependency came from the header-only fallback folder
# (a GPU machine without the -dev packages): an installed package must name system packages.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
if(SHARDTOPK_USES_VENDOR)
  message(STATUS "shardtopk: install rules off (dependencies from ${SHARDTOPK_VENDOR_DIR})")
  return()
endif()

set(_areas shardtopk_core shardtopk_filter shardtopk_io shardtopk_engine shardtopk_comm shardtopk_index shardtopk_storage shardtopk_service)
install(TARGETS shardtopk_lib ${_areas} shardtopk_fmtlog shardtopk_yaml shardtopk_hdf5 shardtopk_json shardtopk_mhd shardtopk_simdjson shardtopk_deflate shardtopk_gnutls
        EXPORT shardtopkTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/shardtopk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS shardtopk RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT shardtopkTargets NAMESPACE shardtopk:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/shardtopk)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/shardtopkConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/shardtopkConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/shardtopk)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/shardtopkConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/shardtopkConfig.cmake ${PROJECT_BINARY_DIR}/shardtopkConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/shardtopk)
