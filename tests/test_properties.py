"""Property tests: whatever a user types as a schema, template, project name or import row, the answer is
a valid object or the one documented error, never another exception."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffjev import Schema, SchemaError, Template
from diffjev.io import Rejected, Row, SourceError, read_rows
from storage import repo
from storage.db import Database

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
question = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.text(max_size=8), st.integers()),
        "type": st.sampled_from(["yes_no", "choice", "score", "noul", "bool", "rating", 3]),
        "instructions": st.one_of(st.text(max_size=10), st.none()),
        "options": st.lists(st.one_of(st.text(max_size=6), json_values), max_size=4),
        "levels": st.lists(st.text(max_size=6), max_size=12),
        "criteria": json_values,
        "extra": json_values,
    },
)
schemas = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "questions": st.one_of(
                st.lists(question, max_size=4), st.dictionaries(st.text(max_size=6), question, max_size=4), json_values
            )
        },
        optional={
            "template": st.one_of(st.text(max_size=30), json_values),
            "samples": json_values,
            "instructions": json_values,
            "auto_max": json_values,
        },
    ),
)


@settings(max_examples=400, deadline=None)
@given(schemas)
def test_schema_parsing_gives_a_schema_or_a_schema_error(data):
    try:
        schema = Schema.from_dict(data)
    except SchemaError:
        return
    assert schema.questions and Schema.from_dict(schema.to_dict()) == schema


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab{}:\n x_")), max_size=30),
    st.lists(st.text("abx_", min_size=1, max_size=3), max_size=3),
)
def test_template_parsing_gives_a_template_or_a_schema_error(text, ids):
    try:
        template = Template.parse(text)
        template.check_against(ids)
    except SchemaError:
        return
    assert sorted(template.slots) == sorted(set(ids))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.one_of(st.binary(max_size=40), st.builds(lambda v: json.dumps(v).encode(), json_values)), max_size=8)
)
def test_import_rows_are_rows_or_named_rejects(tmp_path, lines):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines))
    try:
        for result in read_rows(path):
            assert isinstance(result, (Row, Rejected))
            if isinstance(result, Rejected):
                assert result.line >= 1 and result.reason
            else:
                assert result.text.strip()
    except SourceError:
        pass


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=30))
def test_project_names_cannot_escape_a_folder(tmp_path, name):
    db = Database(tmp_path / "names.db")
    try:
        with db.session() as session:
            repo.create_project(
                session,
                name,
                Schema.from_dict({"questions": [{"id": "q", "type": "yes_no", "instructions": "?"}]}),
                "owner",
            )
    except repo.Conflict:
        return
    finally:
        db.dispose()
    assert "/" not in name and "\\" not in name and not name.startswith(".")
