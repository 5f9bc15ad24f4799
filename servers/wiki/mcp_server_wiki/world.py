"""The bundled synthetic world: a seeded encyclopedia of fictional countries, cities, organisations, people and
events, and questions generated from its facts.

Every fact lives once in a fact table (`World.entities[title].facts`); articles are rendered from it, so the same
fact reads the same wherever it appears (a person's article says where they were born, the city's "Notable people"
lists them; an organisation's founder is also in the founder's "Career"). Names are built from random syllables,
so no answer can come from a model's memory. Same seed and size -> byte-identical articles and questions
(only `random.Random(seed)`-derived streams are used; no hash(), no set iteration order).

Each fact is stated in its subject's article, in a known section, by one of a few sentence templates
(`RELATIONS`); `extract_fact` reverses them, which is how the scripted reference player reads answers out of tool
results, and how tests check that every answer is derivable from the corpus text.
"""

from __future__ import annotations

import bisect
import random
import re
from dataclasses import dataclass, field
from typing import Any

from mcp_server_wiki.article import LEAD, Article

GENERATOR_VERSION = 1
DEFAULT_SEED = 0
DEFAULT_ARTICLES = 400
DEFAULT_QUESTIONS = 300


@dataclass(frozen=True)
class Relation:
    """A functional relation: subject kind -> object kind (an entity kind, or "year")."""

    subject: str
    obj: str
    section: str
    templates: tuple[str, ...]
    question: str  # "{x}" is the subject (a name or a noun phrase)
    phrase: str | None = None  # noun phrase for the object, to chain hops; None for years


RELATIONS: dict[tuple[str, str], Relation] = {
    ("person", "birth_year"): Relation(
        "person", "year", LEAD, ("{s} was born in the year {o}.", "The year of {s}'s birth was {o}."),
        "In what year was {x} born?"),
    ("person", "birthplace"): Relation(
        "person", "city", "Early life", ("{s} was born in {o}.", "{s} was born in the city of {o}."),
        "In which city was {x} born?", "the birthplace of {x}"),
    ("person", "alma_mater"): Relation(
        "person", "org", "Early life", ("{s} studied at {o}.", "{s} was educated at {o}."),
        "At which university did {x} study?", "the university where {x} studied"),
    ("person", "mentor"): Relation(
        "person", "person", "Early life", ("{s} was a student of {o}.", "{s} trained under {o}."),
        "Who was the mentor of {x}?", "the mentor of {x}"),
    ("person", "employer"): Relation(
        "person", "org", "Career", ("{s} worked for {o}.", "{s} spent most of a long career at {o}."),
        "Which organisation did {x} work for?", "the organisation that {x} worked for"),
    ("person", "spouse"): Relation(
        "person", "person", "Personal life", ("{s} was married to {o}.", "{s} married {o}."),
        "Who was {x} married to?", "the spouse of {x}"),
    ("city", "country"): Relation(
        "city", "country", LEAD, ("{s} is a city in {o}.", "{s} is a city located in {o}."),
        "In which country is {x}?", "the country where {x} lies"),
    ("city", "founded"): Relation(
        "city", "year", "History", ("{s} was founded in {o}.", "{s} was first settled in {o}."),
        "In what year was {x} founded?"),
    ("city", "mayor"): Relation(
        "city", "person", "Government", ("The longest-serving mayor of {s} was {o}.", "{s} was long governed by mayor {o}."),
        "Who was the longest-serving mayor of {x}?", "the longest-serving mayor of {x}"),
    ("country", "capital"): Relation(
        "country", "city", LEAD, ("The capital of {s} is {o}.", "{s} has its capital at {o}."),
        "What is the capital of {x}?", "the capital of {x}"),
    ("country", "founded"): Relation(
        "country", "year", "History", ("{s} became an independent state in {o}.", "{s} was founded as a state in {o}."),
        "In what year did {x} become an independent state?"),
    ("org", "founder"): Relation(
        "org", "person", "History", ("{s} was founded by {o}.", "{o} founded {s}."),
        "Who founded {x}?", "the founder of {x}"),
    ("org", "founded"): Relation(
        "org", "year", "History", ("{s} was established in {o}.", "{s} opened its doors in {o}."),
        "In what year was {x} established?"),
    ("org", "headquarters"): Relation(
        "org", "city", LEAD, ("{s} is headquartered in {o}.", "{s} has its headquarters in {o}."),
        "In which city is {x} headquartered?", "the city where {x} is headquartered"),
    ("event", "location"): Relation(
        "event", "city", LEAD, ("{s} took place in {o}.", "{s} was held in {o}."),
        "In which city did {x} take place?", "the city where {x} took place"),
    ("event", "year"): Relation(
        "event", "year", LEAD, ("{s} took place in the year {o}.", "{s} happened in {o}."),
        "In what year did {x} take place?"),
    ("event", "organiser"): Relation(
        "event", "org", "Background", ("{s} was organised by {o}.", "{s} was convened by {o}."),
        "Which organisation organised {x}?", "the organisation that organised {x}"),
}


def relation(kind: str, name: str) -> Relation:
    return RELATIONS[(kind, name)]


_NAME_RE = r"[A-Z\u00c0-\u024f][^.\n]*?"
_YEAR_RE = r"\d{3,4}"


def fact_patterns(kind: str, rel: str, subject: str) -> list[re.Pattern[str]]:
    """Regexes that find the object of (subject, rel) in text, one per sentence template."""
    r = relation(kind, rel)
    obj = _YEAR_RE if r.obj == "year" else _NAME_RE
    out = []
    for t in r.templates:
        pre, _, post = t.partition("{o}")
        pat = re.escape(pre).replace(re.escape("{s}"), re.escape(subject))
        pat += f"(?P<o>{obj})"
        pat += re.escape(post).replace(re.escape("{s}"), re.escape(subject))
        out.append(re.compile(r"(?<![\w])" + pat if pre and pre[0] != "{" else pat))
    return out


def extract_fact(kind: str, rel: str, subject: str, text: str) -> str | None:
    """The object of the fact (subject, rel) as stated in `text`, or None when no template matches."""
    for p in fact_patterns(kind, rel, subject):
        m = p.search(text)
        if m:
            return m.group("o")
    return None


# ---------------------------------------------------------------------------------------------------- names
_ONSETS = ["b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r", "s", "st", "t", "th",
           "v", "w", "z", "kh", "sh", "tr", "fr"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y", "ia"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "nd", "rk", "x", "ll", "st", "v"]
_CITY_SUFFIX = ["holm", "burg", "mere", "ford", "wick", "dale", "ton", "gard", "vale", "port", "moor", "stead", ""]
_COUNTRY_SUFFIX = ["ia", "land", "mark", "ora", "eth", "avia"]
_EVENT_KINDS = ["Accord", "Congress", "Exhibition", "Uprising", "Expedition", "Conference", "Festival", "Council",
                "Treaty", "Regatta", "Tournament", "Summit"]
_COMPANY = ["Industries", "Shipping Company", "Ironworks", "Trading House", "Mills", "Foundry", "Press", "Bank"]
_SOCIETY_FIELDS = ["Natural Philosophy", "Cartography", "Letters", "Engineering", "Music", "Astronomy", "Botany",
                   "Medicine", "History"]
_OCCUPATIONS = ["cartographer", "engineer", "poet", "astronomer", "merchant", "physician", "botanist", "composer",
                "architect", "historian", "painter", "shipwright", "chemist", "jurist", "mathematician"]
_TRAITS = ["meticulous field notes", "a quarrelsome temperament", "generous patronage of young artists",
           "an unusually large private library", "long walks along the river", "a fondness for chess",
           "precise and economical prose", "lectures that drew large crowds", "a lifelong interest in clocks"]
_INDUSTRIES = ["textiles", "shipbuilding", "glassmaking", "printing", "timber", "salt", "wool", "copper", "fishing"]
_GOVERNMENT = ["a constitutional monarchy", "a parliamentary republic", "a federation of provinces",
               "an elective principality"]


def _syllable(rng: random.Random) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)


def _word(rng: random.Random, n: int) -> str:
    return "".join(_syllable(rng) for _ in range(n)).capitalize()


class _Names:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def unique(self, make) -> str:
        for _ in range(1000):
            name = make(self.rng)
            if name.casefold() not in self.used and "." not in name:
                self.used.add(name.casefold())
                return name
        raise RuntimeError("name space exhausted")


# ---------------------------------------------------------------------------------------------------- world
@dataclass
class Entity:
    title: str
    kind: str  # person | city | country | org | event
    facts: dict[str, Any] = field(default_factory=dict)  # relation -> object title or year (int)
    info: dict[str, Any] = field(default_factory=dict)  # descriptive attributes (not asked about)


def normalize_world_opts(seed: int = DEFAULT_SEED, articles: int = DEFAULT_ARTICLES) -> dict[str, int]:
    if articles < 30:
        raise ValueError("a world needs at least 30 articles")
    return {"seed": int(seed), "articles": int(articles)}


@dataclass
class World:
    seed: int
    entities: dict[str, Entity]
    order: list[str]

    def articles(self) -> list[Article]:
        back = _backlinks(self)
        return [_render(self, self.entities[t], back, random.Random(f"{self.seed}:render:{t}")) for t in self.order]

    def aliases(self, title_or_year: Any) -> list[str]:
        """Accepted answer strings for an entity title or a year."""
        if isinstance(title_or_year, int):
            return [str(title_or_year)]
        e = self.entities[title_or_year]
        out = [e.title]
        if e.kind == "city":
            out.append(f"{e.title}, {e.facts['country']}")
        elif e.kind == "person" and e.info.get("surname_unique"):
            out.append(e.info["surname"])
        elif e.kind == "org" and e.title.startswith("University of "):
            out.append(f"{e.title[len('University of '):]} University")
        return out


def generate_world(seed: int = DEFAULT_SEED, articles: int = DEFAULT_ARTICLES) -> World:
    """Generate the world with about `articles` articles (exactly that many entities)."""
    opts = normalize_world_opts(seed, articles)
    seed, n = opts["seed"], opts["articles"]
    rng = random.Random(f"wiki-world:{seed}")
    names = _Names(rng)
    n_country = max(4, n * 3 // 100)
    n_city = max(8, n * 15 // 100)
    n_org = max(6, n * 12 // 100)
    n_event = max(4, n * 10 // 100)
    n_person = n - n_country - n_city - n_org - n_event
    ents: dict[str, Entity] = {}
    order: list[str] = []

    def add(e: Entity) -> Entity:
        ents[e.title] = e
        order.append(e.title)
        return e

    countries = [add(Entity(names.unique(lambda r: _word(r, r.randint(1, 2)) + r.choice(_COUNTRY_SUFFIX)), "country"))
                 for _ in range(n_country)]
    cities = [add(Entity(names.unique(lambda r: _word(r, r.randint(1, 2)) + r.choice(_CITY_SUFFIX)), "city"))
              for _ in range(n_city)]
    for i, c in enumerate(cities):
        country = countries[i % n_country] if i < n_country else rng.choice(countries)
        c.facts["country"] = country.title
        c.facts["founded"] = rng.randint(700, 1650)
        c.info["population"] = rng.randint(8, 900) * 1000
        c.info["river"] = _word(rng, 2)
        c.info["industry"] = rng.choice(_INDUSTRIES)
    for i, k in enumerate(countries):
        k.facts["capital"] = cities[i].title
        k.facts["founded"] = rng.randint(1300, 1800)
        k.info["government"] = rng.choice(_GOVERNMENT)

    people = []
    surnames: dict[str, int] = {}
    for _ in range(n_person):
        def person_name(r: random.Random) -> str:
            return f"{_word(r, r.randint(1, 2))} {_word(r, r.randint(2, 3))}"

        p = add(Entity(names.unique(person_name), "person"))
        p.info["surname"] = p.title.split(" ", 1)[1]
        surnames[p.info["surname"]] = surnames.get(p.info["surname"], 0) + 1
        p.facts["birth_year"] = rng.randint(1700, 1900)
        p.facts["birthplace"] = rng.choice(cities).title
        p.info["occupation"] = rng.choice(_OCCUPATIONS)
        p.info["trait"] = rng.choice(_TRAITS)
        p.info["death_year"] = p.facts["birth_year"] + rng.randint(35, 90)
        people.append(p)
    place_names = {x.title.casefold() for x in cities + countries}
    for p in people:
        p.info["surname_unique"] = surnames[p.info["surname"]] == 1 and p.info["surname"].casefold() not in place_names

    orgs = []
    by_birth = sorted(people, key=lambda p: (p.facts["birth_year"], p.title))
    for i in range(n_org):
        kind = "university" if i % 4 == 0 else rng.choice(["company", "company", "society", "museum"])
        city = rng.choice(cities)
        if kind == "university":
            # named after a fresh word, never after its city: a name must not give a fact away
            make = lambda r: f"University of {_word(r, 2)}" if r.random() < 0.5 else f"{_word(r, 2)} University"  # noqa: E731
        elif kind == "company":
            make = lambda r: f"{_word(r, r.randint(1, 2))} {r.choice(_COMPANY)}"  # noqa: E731
        elif kind == "society":
            make = lambda r: f"{_word(r, 2)} Society of {r.choice(_SOCIETY_FIELDS)}"  # noqa: E731
        else:
            make = lambda r: f"{_word(r, 2)} Museum"  # noqa: E731
        o = add(Entity(names.unique(make), "org"))
        founder = rng.choice(people)
        o.facts["founder"] = founder.title
        o.facts["founded"] = founder.facts["birth_year"] + rng.randint(25, 45)
        o.facts["headquarters"] = city.title
        o.info["type"] = kind
        o.info["staff"] = rng.randint(12, 4000)
        orgs.append(o)
    universities = [o for o in orgs if o.info["type"] == "university"]

    # candidates are prefixes / ranges of lists sorted by year (bisect), so 100k-article worlds stay fast
    unis_sorted = sorted(universities, key=lambda o: (o.facts["founded"], o.title))
    uni_years = [o.facts["founded"] for o in unis_sorted]
    orgs_sorted = sorted(orgs, key=lambda o: (o.facts["founded"], o.title))
    org_years = [o.facts["founded"] for o in orgs_sorted]
    birth_years = [m.facts["birth_year"] for m in by_birth]
    for p in people:
        by = p.facts["birth_year"]
        k = bisect.bisect_right(uni_years, by + 18)
        if k and rng.random() < 0.8:
            p.facts["alma_mater"] = unis_sorted[rng.randrange(k)].title
        k = bisect.bisect_right(org_years, by + 40)
        if k and rng.random() < 0.85:
            job = orgs_sorted[rng.randrange(k)]
            if job.facts["founder"] != p.title:
                p.facts["employer"] = job.title
        lo, hi = bisect.bisect_left(birth_years, by - 45), bisect.bisect_right(birth_years, by - 15)
        if hi > lo and rng.random() < 0.7:
            p.facts["mentor"] = by_birth[rng.randrange(lo, hi)].title
    singles = [p for p in people if rng.random() < 0.5]
    singles.sort(key=lambda p: (p.facts["birth_year"], rng.random()))
    for a, b in zip(singles[0::2], singles[1::2]):
        if abs(a.facts["birth_year"] - b.facts["birth_year"]) <= 12:
            a.facts["spouse"], b.facts["spouse"] = b.title, a.title
    for c in cities:
        if rng.random() < 0.75:
            c.facts["mayor"] = rng.choice(people).title

    for _ in range(n_event):
        e = add(Entity(names.unique(lambda r: f"{_word(r, 2)} {r.choice(_EVENT_KINDS)}"), "event"))
        org = rng.choice(orgs)
        e.facts["organiser"] = org.title
        e.facts["year"] = org.facts["founded"] + rng.randint(1, 60)
        e.facts["location"] = rng.choice(cities).title
        e.info["attendance"] = rng.randint(40, 20000)
        e.info["kind"] = e.title.rsplit(" ", 1)[1].lower()
    return World(seed=seed, entities=ents, order=order)


# ---------------------------------------------------------------------------------------------------- rendering
def _state(w: World, e: Entity, rel: str, rng: random.Random) -> str:
    r = relation(e.kind, rel)
    return rng.choice(r.templates).format(s=e.title, o=e.facts[rel])


def _backlinks(w: World) -> dict[tuple[str, str], list[str]]:
    back: dict[tuple[str, str], list[str]] = {}
    for t in w.order:
        e = w.entities[t]
        for rel, obj in e.facts.items():
            if isinstance(obj, str):
                back.setdefault((obj, rel), []).append(t)
    return back


def _listing(items: list[str], limit: int = 8) -> str:
    items = items[:limit]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _render(w: World, e: Entity, back: dict[tuple[str, str], list[str]], rng: random.Random) -> Article:
    secs: dict[str, list[str]] = {}

    def say(section: str, sentence: str) -> None:
        secs.setdefault(section, []).append(sentence)

    def fact(rel: str) -> None:
        if rel in e.facts:
            say(relation(e.kind, rel).section, _state(w, e, rel, rng))

    t, f, info = e.title, e.facts, e.info
    if e.kind == "person":
        country = w.entities[f["birthplace"]].facts["country"]
        say(LEAD, f"{t} was a {info['occupation']} from {country}.")
        fact("birth_year")
        say(LEAD, f"{t} died in {info['death_year']}.")
        fact("birthplace")
        say("Early life", f"As a child, {t} showed an early interest in the work of a {info['occupation']}.")
        fact("alma_mater")
        fact("mentor")
        fact("employer")
        say("Career", f"{t} was known for {info['trait']}.")
        for o in back.get((t, "founder"), []):
            say("Career", f"In {w.entities[o].facts['founded']}, {t} established {o}.")
        fact("spouse")
        if "spouse" not in f:
            say("Personal life", f"{t} never married.")
        students = back.get((t, "mentor"), [])
        if students:
            say("Legacy", f"The students of {t} included {_listing(students)}.")
        for c in back.get((t, "mayor"), []):
            say("Legacy", f"{t} served for many years as mayor of {c}.")
    elif e.kind == "city":
        fact("country")
        say(LEAD, f"It lies on the river {info['river']} and has a population of about {info['population']:,}.")
        fact("founded")
        say("History", f"The town grew around its {info['industry']} trade.")
        fact("mayor")
        say("Economy", f"The economy of {t} has long depended on {info['industry']}.")
        for o in back.get((t, "headquarters"), []):
            say("Economy", f"{o} has its main offices in the city.")
        born = back.get((t, "birthplace"), [])
        if born:
            say("Notable people", f"People born in {t} include {_listing(born)}.")
        for ev in back.get((t, "location"), []):
            say("Events", f"The city hosted {ev} in {w.entities[ev].facts['year']}.")
    elif e.kind == "country":
        say(LEAD, f"{t} is a country governed as {info['government']}.")
        fact("capital")
        fact("founded")
        cities = back.get((t, "country"), [])
        say("Geography", f"The cities of {t} include {_listing(cities, 12)}.")
    elif e.kind == "org":
        kind = info["type"]
        say(LEAD, f"{t} is a {kind} with about {info['staff']:,} members and staff.")
        fact("headquarters")
        fact("founder")
        fact("founded")
        staff = back.get((t, "employer"), [])
        if staff:
            say("People", f"Notable people who worked for {t} include {_listing(staff)}.")
        alumni = back.get((t, "alma_mater"), [])
        if alumni:
            say("Alumni", f"Alumni of {t} include {_listing(alumni)}.")
        for ev in back.get((t, "organiser"), []):
            say("Activities", f"{t} organised {ev}.")
    elif e.kind == "event":
        fact("location")
        fact("year")
        fact("organiser")
        say("Background", f"The {info['kind']} was announced several months in advance.")
        say("Attendance", f"About {info['attendance']:,} people attended.")
    ordered = [LEAD] + [s for s in secs if s != LEAD]
    return Article(t, [(s, " ".join(secs[s])) for s in ordered if s in secs])


# ---------------------------------------------------------------------------------------------------- questions
DIFFICULTY = {1: "easy", 2: "medium", 3: "hard"}


def generate_questions(world: World, n: int = DEFAULT_QUESTIONS, seed: int | None = None) -> list[dict[str, Any]]:
    """`n` questions, hops cycling 1, 2, 3 (stratified), each with its answer, aliases and fact chain.

    A chain is a list of hops `{subject, kind, relation, section, object}`; the question names only the first
    subject, the rest must be found by reading. All entities on a chain are distinct, so answers are unique.
    """
    seed = world.seed if seed is None else seed
    rng = random.Random(f"wiki-questions:{world.seed}:{seed}")
    titles = list(world.order)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 200 * n + 1000:
            raise RuntimeError(f"could only generate {len(out)} distinct questions")
        hops = len(out) % 3 + 1
        e = world.entities[rng.choice(titles)]
        chain: list[dict[str, Any]] = []
        visited = {e.title}
        cur = e
        for h in range(hops):
            last = h == hops - 1
            rels = [r for r in sorted(cur.facts) if last or relation(cur.kind, r).obj != "year"]
            rels = [r for r in rels if not isinstance(cur.facts[r], str) or cur.facts[r] not in visited]
            if not rels:
                break
            r = rng.choice(rels)
            obj = cur.facts[r]
            chain.append({"subject": cur.title, "kind": cur.kind, "relation": r,
                          "section": relation(cur.kind, r).section, "object": str(obj)})
            if isinstance(obj, str):
                visited.add(obj)
                cur = world.entities[obj]
        if len(chain) != hops:
            continue
        x = chain[0]["subject"]
        for step in chain[:-1]:
            x = relation(step["kind"], step["relation"]).phrase.format(x=x)
        last = chain[-1]
        q = relation(last["kind"], last["relation"]).question.format(x=x)
        if q in seen:
            continue
        seen.add(q)
        obj = world.entities[last["subject"]].facts[last["relation"]]
        out.append({"id": f"world{world.seed}-q{len(out)}", "question": q, "answer": str(obj),
                    "aliases": world.aliases(obj), "hops": hops, "difficulty": DIFFICULTY[hops], "chain": chain})
    return out
