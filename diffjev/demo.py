"""The demo project's schema: support tickets from a SaaS product, one question of each kind."""

TICKETS_SCHEMA = {
    "instructions": "Support tickets from a SaaS product.",
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
        {
            "id": "team",
            "type": "choice",
            "instructions": "Which team should handle it?",
            "options": [
                {"name": "billing"},
                {"name": "technical", "description": "bugs, outages"},
                {"name": "account"},
            ],
        },
        {
            "id": "tone",
            "type": "score",
            "instructions": "How upset is the customer?",
            "levels": ["calm", "annoyed", "furious"],
        },
    ],
}

# The demo project: the tickets' schema, with each ticket's gold answers (`expected_<question>`, for checking
# the model) kept off the annotator's card so they cannot lead the answer. They stay in the item and its exports.
EXPECTED_FIELDS = {"urgent": "expected_urgent", "team": "expected_team", "tone": "expected_tone"}
DEMO_PROJECT_SCHEMA = {**TICKETS_SCHEMA, "hidden_fields": list(EXPECTED_FIELDS.values())}

# A ticket is an opening, a problem and a closing. Its gold answers follow from how it was composed: the
# problem sets the team; an "URGENT:" opening or a closing with a deadline today makes it urgent; the
# closing sets the tone.
_URGENT_OPENING = "URGENT:"
_OPENINGS = ["Hi team,", "Hello,", _URGENT_OPENING, "Hey there,", "Good morning,", "To whom it may concern,"]
_PROBLEMS = [
    ("the whole dashboard is down and nothing loads", "technical"),
    ("I was charged twice for this month's invoice", "billing"),
    ("I cannot reset my password, the link has expired", "account"),
    ("the CSV export has been failing since yesterday", "technical"),
    ("please change the card on file to our new company card", "billing"),
    ("how do I add two more seats for new colleagues?", "account"),
    ("the API returns 500 errors for every request", "technical"),
    ("our refund from last quarter never arrived", "billing"),
    ("I want to transfer ownership of the workspace", "account"),
    ("search results are empty even though the data is there", "technical"),
]
# (closing, due today, tone)
_CLOSINGS = [
    ("We have a customer demo at noon, please hurry.", True, "annoyed"),
    ("No rush, whenever you get a chance.", False, "calm"),
    ("This is the third time this month and I am losing patience.", False, "annoyed"),
    ("Thanks a lot for your help!", False, "calm"),
    ("If this is not fixed today we will cancel our plan.", True, "furious"),
    ("Could you let me know by the end of the week?", False, "calm"),
]


def demo_tickets(n: int = 60) -> list[dict[str, str]]:
    """Support tickets for the demo project, written here so the studio has something to label offline."""
    tickets = []
    for i in range(n):
        problem, team = _PROBLEMS[i % len(_PROBLEMS)]
        opening = _OPENINGS[i % len(_OPENINGS)]
        closing, due_today, tone = _CLOSINGS[(i * 7 + i // 10) % len(_CLOSINGS)]
        urgent = "yes" if opening == _URGENT_OPENING or due_today else "no"
        tickets.append(
            {
                "id": f"demo-{i + 1:03d}",
                "text": f"{opening} {problem}. {closing}",
                "expected_urgent": urgent,
                "expected_team": team,
                "expected_tone": tone,
            }
        )
    return tickets
