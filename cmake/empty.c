/* empty.c - the shared library's own source: everything else comes from the
 * static library, linked in whole (cmake/install.cmake). */
typedef int ra_shared_library_has_no_code_of_its_own;
