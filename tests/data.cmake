# Datasets and loaders. The tests write their fixtures into a mkdtemp directory; test_data also
# checks the real Fashion-MNIST and fortunes corpora when installed, and skips those two cases if
# not. The tests write gzip fixtures themselves. ZLIB::ZLIB from engine/ is not visible in this
# directory (imported targets are directory-scoped), so look zlib up here too.
find_package(ZLIB REQUIRED)
foreach(t test_data test_data_loaders)
  ob_add_unit_test(${t} ${t}.c)
  target_link_libraries(${t} PRIVATE ZLIB::ZLIB)
endforeach()
