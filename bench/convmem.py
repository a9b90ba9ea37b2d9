"""A labelled conversational-memory set, generated: conversations with questions and the turns that answer them.

Why generated: the public sets we measured on cannot ship with memesh (LoCoMo
is CC BY-NC; LongMemEval's data is on Hugging Face, out of reach here), so
this one is made by this file, deterministically from a seed, and ships with
memesh under the project's licence.

What it holds (``build()``; ``python -m bench.convmem --stats`` prints it):
twelve two-speaker conversations, one per project, of about 270 turns each
over ten sessions. Most turns are chit-chat; planted among them are facts
about people, pets, places, employers, numbers and codes, some of which change
later. Each question names the turn(s) that answer it and one of four kinds:

- ``entity``: asks about a rare name or code that the evidence states verbatim
  ("Which city did Ysolde move to?");
- ``paraphrase``: asks in other words than the evidence ("What breed of dog
  did they adopt?" for "we took home a greyhound from the shelter");
- ``update``: a fact stated, then changed later; the evidence is the latest
  statement only (the earlier one is a distractor);
- ``multi``: needs two turns (a person's city and their employer).

Biases, stated plainly: the turns come from templates, so the vocabulary is
smaller and more regular than real talk. ``entity`` questions favour lexical
matching by construction, ``paraphrase`` questions favour dense matching by
construction; distractors reuse every name in unrelated turns and every topic
word in filler, so neither method wins a kind trivially. The mix is balanced
across the four kinds; a set of real conversations would have its own mix.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from dataclasses import dataclass, field

NAMES = [
    "Ysolde",
    "Mirek",
    "Thandiwe",
    "Oisin",
    "Zofia",
    "Kaito",
    "Anouk",
    "Bastian",
    "Ilse",
    "Teodor",
    "Noor",
    "Leocadia",
    "Ravindra",
    "Siobhan",
    "Emeka",
    "Greta",
    "Jarrah",
    "Katarzyna",
    "Matteo",
    "Priyanka",
    "Quill",
    "Rosalind",
    "Stellan",
    "Tamsin",
    "Ulrike",
    "Vesna",
    "Wendeline",
    "Xavi",
    "Yannick",
    "Zainab",
    "Agnieszka",
    "Bertil",
]
CITIES = [
    "Tromso",
    "Valparaiso",
    "Ljubljana",
    "Quetzaltenango",
    "Hobart",
    "Tbilisi",
    "Bergamo",
    "Oaxaca",
    "Gdansk",
    "Tartu",
    "Cuenca",
    "Plovdiv",
    "Nagano",
    "Ghent",
    "Arequipa",
    "Bendigo",
]
EMPLOYERS = [
    "Halvorsen Robotics",
    "Quillfeather Press",
    "Brightwater Labs",
    "Okonkwo Logistics",
    "Vantablue Studios",
    "Marrowfield Bank",
    "Pelican Grid",
    "Stonebrook Clinic",
    "Ferroline Rail",
    "Juniper Analytics",
]
PET_NAMES = ["Biscuit", "Pumpernickel", "Moxie", "Tofu", "Rasputin", "Clementine", "Waffles", "Ziggy", "Noodle", "Saffron"]
DOGS = [("greyhound", "retired racing dog"), ("dachshund", "sausage dog"), ("border collie", "sheepdog")]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
HOBBIES = [
    ("pottery", "I signed up for a wheel-throwing class at the ceramics studio", "making things out of clay"),
    ("climbing", "I have been bouldering at the gym three evenings a week", "scaling walls indoors"),
    ("baking", "I finally mastered a sourdough starter and bake a loaf every weekend", "making bread"),
    ("chess", "I joined an online league and play rapid games every night", "a board game against people on the internet"),
    ("birding", "I bought binoculars and log warblers at the marsh before work", "watching wild birds"),
]
FILLER = [
    "haha yes, that sounds about right",
    "the weather has been strange all week, rain and then sun",
    "did you watch the match last night? what a finish",
    "I need more coffee before I can think about anything",
    "work was busy, lots of meetings about the new office move",
    "my neighbour's dog keeps barking at the post van",
    "we should plan a trip somewhere warm this winter",
    "I keep forgetting to water the plants on the balcony",
    "the train was late again, twenty minutes this time",
    "I tried that new ramen place near the station, decent",
    "honestly I just want a quiet weekend at home",
    "my phone battery dies by lunchtime these days",
    "did I tell you my cousin is learning the violin",
    "the city is repaving our street, so much noise",
    "I read half a novel on the flight and fell asleep",
    "we had a power cut for an hour, no big deal",
]
FILLER_WITH = [
    "{name} says hi, by the way",
    "I ran into {name} at the supermarket, small world",
    "{name} recommended a podcast about history, it was fine",
    "remember when {name} got lost on the way to the concert",
    "{city} came up in a quiz show last night",
    "someone at work is from {city}, apparently it is lovely",
    "{employer} was in the news again, something about a merger",
    "I saw an advert for {employer} on the bus",
    "my aunt has a cat called {pet}, not a dog",
    "we talked about adopting a pet but the lease forbids it",
    "the office is closed on {day} for maintenance",
    "the gym changed its hours on {day}",
]


@dataclass(frozen=True)
class Turn:
    id: str
    speaker: str
    text: str
    session: int


@dataclass
class Conversation:
    id: str
    speakers: tuple[str, str]
    turns: list[Turn] = field(default_factory=list)


@dataclass(frozen=True)
class Question:
    id: str
    conversation_id: str
    text: str
    kind: str
    evidence: tuple[str, ...]


@dataclass
class Dataset:
    conversations: list[Conversation]
    questions: list[Question]


class _Writer:
    """Builds one conversation: facts placed at chosen positions among filler turns."""

    def __init__(self, rng: random.Random, cid: str, speakers: tuple[str, str], turns: int, sessions: int) -> None:
        self.rng, self.conv = rng, Conversation(cid, speakers)
        self.total, self.sessions = turns, sessions
        self.slots: dict[int, str] = {}

    def place(self, text: str, low: float = 0.0, high: float = 1.0) -> int:
        """Reserve a free position in [low, high) of the conversation for ``text``; returns it."""
        for _ in range(1000):
            position = self.rng.randrange(int(low * self.total), max(int(low * self.total) + 1, int(high * self.total)))
            if position not in self.slots:
                self.slots[position] = text
                return position
        raise RuntimeError("no free position")

    def turn_id(self, position: int) -> str:
        return f"{self.conv.id}-t{position:04d}"

    def finish(self, fill: list[str]) -> Conversation:
        for position in range(self.total):
            text = self.slots.get(position) or self.rng.choice(fill)
            speaker = self.conv.speakers[position % 2]
            session = position * self.sessions // self.total + 1
            self.conv.turns.append(Turn(self.turn_id(position), speaker, text, session))
        return self.conv


def _conversation(rng: random.Random, n: int, questions: list[Question]) -> Conversation:
    speakers = (rng.choice(["Alex", "Sam", "Jo", "Robin"]), rng.choice(["Casey", "Morgan", "Riley", "Drew"]))
    cid = f"conv{n:02d}"
    w = _Writer(rng, cid, speakers, 270, 10)
    people = rng.sample(NAMES, 8)
    cities = rng.sample(CITIES, 8)
    employers = rng.sample(EMPLOYERS, 8)

    def ask(kind: str, text: str, *positions: int) -> None:
        questions.append(
            Question(
                f"{cid}-q{len([q for q in questions if q.conversation_id == cid]):02d}",
                cid,
                text,
                kind,
                tuple(w.turn_id(p) for p in positions),
            )
        )

    for i in range(6):  # entity: a rare name and where they moved; multi: the same person's employer too
        person, city, employer = people[i], cities[i], employers[i]
        moved = w.place(f"my friend {person} just moved to {city}, she sent photos of the harbour")
        hired = w.place(f"{person} also got a job offer from {employer}, starts next month")
        ask("entity", f"Which city did {person} move to?", moved)
        ask("multi", f"Which company hired the friend who relocated to {city}, and who is she?", moved, hired)
    code = f"{rng.choice('KQXZ')}{rng.randrange(100, 999)}-{rng.choice('ABCDEFGH')}{rng.randrange(10, 99)}"
    ticket = w.place(f"the insurance claim reference is {code}, I wrote it on the fridge")
    ask("entity", f"What was the reference {code.split('-')[0]} about?", ticket)
    for i, (hobby, said, asked) in enumerate(rng.sample(HOBBIES, 3)):  # paraphrase
        p = w.place(said)
        ask("paraphrase", f"Which new pastime involving {asked} did the speaker take up?", p)
        del hobby, i
    breed, description = rng.choice(DOGS)
    pet = rng.choice(PET_NAMES)
    adopted = w.place(f"we took home a {breed} from the shelter and named him {pet}")
    ask("paraphrase", f"What kind of {description} joined the household?", adopted)
    ask("entity", f"What is {pet}?", adopted)
    for topic in ("book club", "five-a-side football", "language exchange"):  # update: the latest statement answers
        first, later = rng.sample(WEEKDAYS, 2)
        old = w.place(f"our {topic} meets on {first} evenings now", 0.05, 0.45)
        new = w.place(f"heads up, the {topic} moved from {first} to {later}", 0.55, 0.95)
        ask("update", f"On which day does the {topic} meet these days?", new)
        ask("update", f"Has the {topic} schedule changed, and to what day?", new)
        del old
    salary = rng.randrange(41, 99)
    raise_at = w.place(f"I negotiated the raise, it comes to {salary} thousand a year", 0.6, 1.0)
    w.place(f"I plan to ask for a raise, hoping for {salary - 7} thousand", 0.0, 0.4)
    ask("update", "How much did the pay rise come to in the end?", raise_at)
    ask("paraphrase", "How did the salary negotiation turn out?", raise_at)
    fill = FILLER * 3 + [
        t.format(
            name=rng.choice(people),
            city=rng.choice(cities),
            employer=rng.choice(employers),
            pet=rng.choice(PET_NAMES),
            day=rng.choice(WEEKDAYS),
        )
        for t in FILLER_WITH
        for _ in range(3)
    ]
    return w.finish(fill)


def build(seed: int = 7, conversations: int = 12) -> Dataset:
    """The set for ``seed``: the same seed gives the same set."""
    rng = random.Random(seed)
    questions: list[Question] = []
    convs = [_conversation(rng, n, questions) for n in range(conversations)]
    return Dataset(convs, questions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stats", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    data = build(args.seed)
    turns = [t for c in data.conversations for t in c.turns]
    by_id = {t.id: t for t in turns}
    print(f"conversations {len(data.conversations)}, turns {len(turns)}, questions {len(data.questions)}")
    print(f"mean words per turn {sum(len(t.text.split()) for t in turns) / len(turns):.1f}")
    print("questions per kind", dict(Counter(q.kind for q in data.questions)))
    for kind in sorted({q.kind for q in data.questions}):
        for q in [q for q in data.questions if q.kind == kind][:2]:
            print(f"  [{kind}] {q.text}\n      -> " + " | ".join(by_id[e].text for e in q.evidence))


if __name__ == "__main__":
    main()
