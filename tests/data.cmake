# Datasets and loaders. test_data writes its fixtures into a mkdtemp directory; it also checks
# the real Fashion-MNIST and fortunes corpora when installed, and skips those two cases if not.
ob_add_unit_test(test_data test_data.c)
# The test writes gzip fixtures itself. ZLIB::ZLIB from engine/ is not visible in this
# directory (imported targets are directory-scoped), so look zlib up here too.
find_package(ZLIB REQUIRED)
target_link_libraries(test_data PRIVATE ZLIB::ZLIB)
