"""The word lists the generator draws from, shipped with the package (no nltk / wonderwords download).

Written for ctxbench: common English adjectives, nouns and verbs. RULER draws its needle keys as
``adjective-noun`` pairs from the wonderwords lists and its common words from wonderwords' nouns,
adjectives and verbs (plus a larger English list when a context needs more words): :func:`key_words`
and :func:`plain_words` play those parts; when a task needs more distinct words than these lists hold,
:func:`plain_words` adds the lowercase words of the shipped public-domain text (``haystack.essay_words``).
"""
from __future__ import annotations

ADJECTIVES = tuple("""
able absent acid adorable afraid agile alert ample ancient angry anxious arctic arid awake bald
basic bitter blank bold brave breezy brief bright brisk broad bumpy busy calm candid careful cheap
cheerful chilly clean clever cloudy clumsy coarse cold cosmic crisp crooked cruel curious curly
damp dark dear deep dense dizzy dry dull dusty eager early earnest easy elastic elder empty equal
exotic faint fancy fast fierce filthy firm flat fluffy fond foolish fragile frank free fresh
friendly frozen funny fuzzy gentle giant giddy glad gloomy golden grand gray greedy green grumpy
hairy happy hard harsh hasty heavy hidden hollow honest huge humble hungry icy idle jolly juicy
keen kind large late lazy lean light little lively lonely loose loud lucky lush mad massive
mellow mighty mild misty modern moist narrow nasty neat nervous noble noisy odd old orange pale
plain plump polite poor proud purple quick quiet rapid rare raw ready red rich rigid ripe rough
round rude rusty sad salty scary sharp shiny short shy silent silly simple sleek slim slow small
smart smooth soft solid sour spicy stale steep sticky stiff stormy strange strict strong sunny
sweet swift tall tame tender thick thin tidy tiny tough twisted ugly vast violet vivid warm weak
wet wicked wide wild windy wise witty wooden young zealous
""".split())

NOUNS = tuple("""
acorn actor airport alarm album anchor angle ankle apple apron arch arena armchair arrow attic
badge bakery balcony balloon banana bandit banjo barn basket beach beacon beard beetle bell bench
berry bicycle blanket blossom boat bonnet bottle boulder bracelet branch bread brick bridge broom
bucket buffalo bugle butter button cabin cable cactus camel candle canoe canyon carpet carrot
castle cave cellar chair chalk cherry chimney circus cliff clock cloud coconut comet compass
cookie copper cottage cousin crater crayon cricket crown cup curtain daisy desert diamond dinner
doctor dolphin donkey dragon drawer drum eagle easel elbow engine envelope falcon feather fence
ferry fiddle finger flag flute forest fountain fox garden garlic gate glacier glove goat granite
guitar hammer harbor harp hat helmet hero hill honey horizon horse island jacket jaguar jelly
jewel kettle kitchen kite ladder lagoon lantern lemon library lighthouse lion lizard lobster
locket magnet mango maple marble meadow melon mirror monkey moon mountain muffin needle nest
notebook oasis ocean octopus onion orchard otter owl paddle palace panda parrot peach pebble
pencil pepper piano pillow pirate planet plum pocket pony potato pumpkin puppet quilt rabbit
raccoon radio rainbow raven ribbon river robot rocket saddle sailor salmon sandal scarf school
shadow shell shovel singer sparrow spider spoon squirrel stable statue storm sugar summit swan
sword table teapot tiger toast tomato tower tractor trumpet tulip tunnel turtle umbrella valley
violin volcano wagon walnut whale whistle window wizard wolf yacht zebra
""".split())

VERBS = tuple("""
accept admire argue arrive bake balance bathe beg behave bless boil borrow bounce breathe brush
build bury calculate carry carve celebrate chase chew clap climb collect comfort cook crawl cross
dance decorate deliver dig dive divide drag dream drift educate embrace escape explain fetch
float fold gather giggle glow grab greet guard guess hammer hang harvest hover hug hunt imagine
inform invent jog juggle jump kick kneel knit knock laugh launch lift listen march melt mend
mix nod obey offer open paint pause peel plant polish pour pray print pull punch question race
reach relax repair rescue return ride roar roll rush sail scatter scold search shiver sing skate
sketch slide smile sneeze sparkle spill squeeze stitch stretch swim swing tickle travel tremble
trot tumble twist unlock vanish visit wander wash wave whisper wink wobble wrap yawn yell zoom
""".split())


def key_words() -> list[str]:
    """``adjective-noun`` keys (RULER's needle keys are such pairs), sorted."""
    return sorted({f"{a}-{n}" for a in ADJECTIVES for n in NOUNS})


def plain_words(extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Single words for the common-words task: nouns, adjectives, verbs, then ``extra`` (deduplicated, in order)."""
    seen: dict[str, None] = {}
    for w in (*NOUNS, *ADJECTIVES, *VERBS, *extra):
        seen.setdefault(w, None)
    return list(seen)
