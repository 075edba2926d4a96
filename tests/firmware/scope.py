"""Golden vectors outside the firmware codec's scope, each with the reason.

The firmware encodes what a board sends and decodes what it receives (device_firmware/README.md).
tests/test_firmware_vectors.py fails when a vector is neither handled by the firmware nor listed
here, and when a listed vector is in fact handled (the list must not go stale).
"""

_SIB_DECODES = "an invalid REQ/ACK: decoding requests is the SIB's side, a board never does"
_CONSTRUCT = "CONSTRUCT: boards run SELECT/ASK; CONSTRUCT results are not decoded on a board"
_MANAGEMENT = "graph management (CREATE/DROP/COPY/MOVE/ADD) is an administrator's job, not a board's"
_BIND = "BIND option: computed values are not needed on a board"
_OPTIONAL = "OPTIONAL PATTERN option of pattern updates: not needed on a board"
_FUNCTIONS = ("the SPARQL 1.1 function tokens (§8.2, 0x19-0x4e): a board's filters compare, "
              "compute and match (0x00-0x18); a function on a gateway's subscription costs a "
              "board nothing, and its bundle is within 1 KiB of its 24 KiB budget")

OUT_OF_SCOPE: dict[str, str] = {
    "ack_bare": "the firmware always sends the ACK's 2-byte sequence number (§10 rule 5)",
    "ind_construct_tcp": _CONSTRUCT,
    "ind_construct_udp_seq_65535": _CONSTRUCT,
    "invalid_0x04_construct_variable": _CONSTRUCT,
    "req_construct_con_udp": _CONSTRUCT,
    "req_construct_non_tcp": _CONSTRUCT,
    "req_construct_persistent_con_udp": _CONSTRUCT,
    "req_construct_persistent_non_tcp": _CONSTRUCT,
    "req_opt_max_response_size_u32_max": _CONSTRUCT,
    "req_opt_modifier_construct": _CONSTRUCT,
    "res_construct_empty": _CONSTRUCT,
    "res_construct_max_size_cut": _CONSTRUCT,
    "res_construct_persistent_udp": _CONSTRUCT,
    "res_construct_tcp": _CONSTRUCT,
    "res_construct_udp": _CONSTRUCT,
    "req_add_con_udp": _MANAGEMENT,
    "req_add_default_to_named": _MANAGEMENT,
    "req_add_non_tcp": _MANAGEMENT,
    "req_copy_con_udp": _MANAGEMENT,
    "req_copy_default_to_named": _MANAGEMENT,
    "req_copy_non_tcp": _MANAGEMENT,
    "req_create_con_udp": _MANAGEMENT,
    "req_create_non_tcp": _MANAGEMENT,
    "req_drop_con_udp": _MANAGEMENT,
    "req_drop_default_and_named": _MANAGEMENT,
    "req_drop_non_tcp": _MANAGEMENT,
    "req_move_con_udp": _MANAGEMENT,
    "req_move_named_to_default": _MANAGEMENT,
    "req_move_non_tcp": _MANAGEMENT,
    "req_uri_length_127": _MANAGEMENT,
    "req_uri_length_128": _MANAGEMENT,
    "req_uri_length_32767": _MANAGEMENT,
    "req_uri_whole_prefix_create": _MANAGEMENT,
    "req_opt_bind": _BIND,
    "req_opt_all_select": _BIND,
    "req_opt_all_update": _BIND,
    "req_opt_optional_pattern": _OPTIONAL,
}
OUT_OF_SCOPE.update({name: _SIB_DECODES for name in (
    "invalid_0x01_version_0_tcp", "invalid_0x01_version_2", "invalid_0x02_tx_0x17",
    "invalid_0x02_tx_0x7f", "invalid_0x03_ack_over_tcp", "invalid_0x03_type_byte_0x80",
    "invalid_0x04_ack_3_bytes_data", "invalid_0x04_bad_datetime", "invalid_0x04_boolean_2",
    "invalid_0x04_create_default_graph", "invalid_0x04_create_gc_0",
    "invalid_0x04_empty_bnode_label", "invalid_0x04_empty_first_triple",
    "invalid_0x04_empty_first_triple_of_second_graph", "invalid_0x04_empty_lang_tag",
    "invalid_0x04_invalid_utf8", "invalid_0x04_langstring_datatype",
    "invalid_0x04_langstring_datatype_via_prefix", "invalid_0x04_literal_subject",
    "invalid_0x04_literal_type_8", "invalid_0x04_object_type_6",
    "invalid_0x04_prefix_index_beyond_list", "invalid_0x04_prefix_index_without_prefix_option",
    "invalid_0x04_reserved_word_0x0e", "invalid_0x04_string_length_3_bytes_not_minimal",
    "invalid_0x04_string_length_not_minimal", "invalid_0x04_tcp_length_below_8",
    "invalid_0x04_tcp_length_mismatch", "invalid_0x04_truncated_graph",
    "invalid_0x04_truncated_tc", "invalid_0x04_uri_length_not_minimal",
    "invalid_0x04_variable_in_insert_data", "invalid_0x05_insert_graph_on_delete_data",
    "invalid_0x05_modifier_on_ask", "invalid_0x05_option_type_0x0c",
    "invalid_0x05_optional_pattern_on_select", "invalid_0x05_prefix_on_terminate",
    "invalid_0x06_bound_not_after_variable", "invalid_0x06_count_0",
    "invalid_0x06_expression_tc_0", "invalid_0x06_filter_bad_boolean",
    "invalid_0x06_modifier_order_3", "invalid_0x06_modifier_reserved_bits",
    "invalid_0x06_prefix_count_0", "invalid_0x06_prefix_entry_empty",
    "invalid_0x06_prefix_entry_nonzero_index", "invalid_0x06_prefix_index_beyond_list_in_option",
    "invalid_0x06_repeated_option", "invalid_0x06_rpn_two_values", "invalid_0x06_rpn_underflow",
    "invalid_0x06_trailing_bytes", "invalid_0x06_truncated_max_response_size",
    "invalid_0x05_option_fault_before_data_prefix_index",
    "invalid_0x05_option_repeated_and_not_applicable", "invalid_0x06_filter_bad_datetime",
    "invalid_0x06_filter_invalid_utf8", "invalid_0x06_filter_langstring_datatype",
    "invalid_0x06_optional_pattern_empty_first_triple",
    "invalid_0x06_unknown_token_0x4f", "invalid_0x06_unknown_token_0xff",
    "invalid_0x06_function_underflow", "invalid_0x06_in_count_leaves_two",
    "invalid_0x06_variadic_count_missing", "invalid_0x06_variadic_underflow",
    "invalid_0x06_echo_length_0",
    "invalid_0x06_echo_length_11", "invalid_0x06_echo_truncated",
    "invalid_0x05_epoch_on_terminate", "invalid_0x06_epoch_0", "invalid_0x06_epoch_repeated",
    "invalid_0x06_epoch_truncated", "invalid_0x06_echo_length_0_tcp", "invalid_0x06_epoch_0_tcp",
    "invalid_0x05_option_type_after_prefix_and_option_prefix_index",
    "invalid_0x05_option_type_before_prefix_and_option_prefix_index",
    "invalid_0x05_not_applicable_after_option_prefix_index",
    "invalid_0x06_epoch_truncated_after_option_prefix_index",
    "invalid_0x04_data_prefix_index_before_option_prefix_index",
    "invalid_0x04_data_prefix_index_before_option_prefix_index_reordered")})
OUT_OF_SCOPE.update({f"req_filter_{name}": _FUNCTIONS for name in (
    "abs", "bnode", "bnode_of", "ceil", "coalesce", "concat", "contains", "datatype", "day",
    "encode_for_uri", "floor", "hours", "if", "in", "iri", "is_blank", "is_iri", "is_literal",
    "is_numeric", "lang", "langmatches", "lcase", "md5", "minutes", "month", "not_in", "now",
    "rand", "replace", "replace_flags", "round", "same_term", "seconds", "sha1", "sha256",
    "sha384", "sha512", "str", "strafter", "strbefore", "strdt", "strends", "strlang", "strlen",
    "strstarts", "struuid", "substr", "substr_len", "timezone", "tz", "ucase", "uuid", "year")})
