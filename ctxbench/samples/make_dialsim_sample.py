"""Write data/samples/dialsim_sample.pickle: a tiny made-up show in DialSim's official pickle layout.

    data[episode][session] = {"script", "date", "hard_q": {type: [q]}, "easy_q": {type: {qid: q}}}
    q = {"questions": {asker: phrasing, "default": phrasing}, "answer": str, "options": [A..E]}

The characters and dialogue are written for this project (no TV scripts). Run from the repo root:
``python data/samples/make_dialsim_sample.py``. The file holds only builtin containers and strings,
so ctxbench's restricted unpickler reads it.
"""
from __future__ import annotations

import pickle
from pathlib import Path

IDK = "I don't know."


def q(default: str, answer: str, options: list[str], **askers: str) -> dict:
    return {"questions": {**askers, "default": default}, "answer": answer, "options": options}


DATA = {
    "S01E01": {
        1: {
            "date": "March 3, 2021",
            "script": (
                "Teleplay: Ctxbench Writers\n"
                "[Scene: The Harbor Bakery, early morning. Nora is stacking loaves.]\n"
                "Nora: Theo, the new oven finally arrived on Monday.\n"
                "Theo: Great! Does it bake sourdough faster?\n"
                "Nora: Twice as fast. And it only burned one batch.\n"
                "Well, two if you count the croissants.\n"
                "Iris: I'm adopting a grey cat named Pepper next week.\n"
            ),
            "hard_q": {
                "cur": [q("What arrived at the bakery on Monday?", "The new oven",
                          ["The new oven", "A cat", "A delivery van", "Flour", IDK],
                          Theo="Nora, what arrived here on Monday?")],
                "fu": [],
            },
            "easy_q": {
                "ans_wo_time": {0: q("What is the name of Iris's cat?", "Pepper",
                                     ["Pepper", "Salt", "Nutmeg", "Ginger", IDK], Nora="Iris, what's your cat called?")},
            },
        },
        2: {
            "date": "March 10, 2021",
            "script": (
                "Iris: Pepper knocked over my plants twice today.\n"
                "Theo: Maybe Pepper wants to be a gardener.\n"
                "Nora: Speaking of which, I'm planting tomatoes on the roof in April.\n"
            ),
            "hard_q": {
                "past": [q("Which batch did the new oven burn on March 3, 2021?", "croissants",
                           ["croissants", "sourdough", "bagels", "muffins", IDK])],
            },
            "easy_q": {
                "dont_know_unans": {0: q("What is Theo's favourite film?", IDK,
                                         ["Casablanca", "Alien", "Up", "Heat", IDK])},
                # an answer that matches no option: dropped (and counted) in the multiple-choice format
                "ans_w_time": {3: q("What did Pepper knock over on March 10, 2021?", "the plants",
                                    ["the lamp", "the oven", "a vase", "a cup", IDK])},
            },
        },
    },
    "S01E02": {
        1: {
            "date": "April 2, 2021",
            "script": (
                "Theo: The roof garden looks amazing, Nora.\n"
                "Nora: The tomatoes are in. Iris brought Pepper to supervise.\n"
                "Iris: He supervised by sleeping in the sun.\n"
            ),
            "hard_q": {
                "past_cur": [q("Where is Nora growing tomatoes?", "On the roof",
                               ["On the roof", "In the bakery", "At Theo's flat", "In the park", IDK])],
            },
            "easy_q": {},
        },
    },
}


def main(out: Path = Path(__file__).resolve().parent / "dialsim_sample.pickle") -> Path:
    with open(out, "wb") as f:
        pickle.dump(DATA, f, protocol=4)
    return out


if __name__ == "__main__":
    print(main())
