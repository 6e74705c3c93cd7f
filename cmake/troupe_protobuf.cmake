# troupe_protobuf(OUT_VAR PROTO...): runs protoc on each .proto (paths relative to the
# source root, e.g. graph/proto/graph.proto) into the build tree, so that code includes
# "graph/proto/graph.pb.h"; appends the generated .pb.cc files to OUT_VAR, and keeps
# -Wextra's warnings out of them.
function(troupe_protobuf out_var)
  set(sources ${${out_var}})
  foreach(proto IN LISTS ARGN)
    get_filename_component(dir ${proto} DIRECTORY)
    get_filename_component(name ${proto} NAME_WE)
    set(out_cc ${PROJECT_BINARY_DIR}/${dir}/${name}.pb.cc)
    set(out_h ${PROJECT_BINARY_DIR}/${dir}/${name}.pb.h)
    add_custom_command(
      OUTPUT ${out_cc} ${out_h}
      COMMAND protobuf::protoc --cpp_out=${PROJECT_BINARY_DIR} -I ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/${proto}
      DEPENDS ${PROJECT_SOURCE_DIR}/${proto} protobuf::protoc
      COMMENT "protoc ${proto}")
    set_source_files_properties(${out_cc} PROPERTIES COMPILE_OPTIONS -Wno-extra)
    list(APPEND sources ${out_cc})
  endforeach()
  set(${out_var} ${sources} PARENT_SCOPE)
endfunction()
