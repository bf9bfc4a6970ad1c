# Tests of examples/review-mining. Included from tests/CMakeLists.txt after POCKET_E2E_ENV and
# POCKET_SYSTEM_PYTHON are set:
#   include(${PROJECT_SOURCE_DIR}/examples/review-mining/tests.cmake)
set(POCKET_REVIEW_MINING_DIR ${PROJECT_SOURCE_DIR}/examples/review-mining)

# No binary, no model: the scorer (hand-computed P/R/F1), the schema checker, the sample data,
# and run.py against a stand-in for `pocket run`.
foreach(name score run_fake)
  add_test(NAME example.review_mining_${name}
    COMMAND ${POCKET_SYSTEM_PYTHON} ${POCKET_REVIEW_MINING_DIR}/test_${name}.py)
  set_tests_properties(example.review_mining_${name} PROPERTIES TIMEOUT 120 LABELS example)
endforeach()

# run.py with the real CLI (--json-schema, --span-source) and stories260K: every answer valid.
add_test(NAME e2e.review_mining
  COMMAND ${POCKET_SYSTEM_PYTHON} ${POCKET_REVIEW_MINING_DIR}/test_run_e2e.py
          --pocket $<TARGET_FILE:pocket_cli>)
set_tests_properties(e2e.review_mining PROPERTIES ENVIRONMENT "${POCKET_E2E_ENV}" TIMEOUT 600
                     LABELS "e2e;example")
