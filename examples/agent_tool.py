#!/usr/bin/env python3
"""An agent's retrieval tool over shardtopk, in process: embed -> search -> texts.

    launch/python.sh examples/agent_tool.py "how do I run on two GPUs?"   # ask the repository's documents
    launch/python.sh examples/agent_tool.py --check                        # self-check (CTest runs it)
    launch/python.sh examples/agent_tool.py --model BAAI/bge-small-en-v1.5 "..."   # a cached sentence-transformers model

The corpus is this repository's own Markdown (README.md and docs/*.md), one entry per
paragraph. The model is any embedder already in the process; by default HashEmbedder, a small
bag-of-words model in torch (hashed words and word pairs, idf-weighted, unit length), so the
example needs no network and no download. With a GPU, the query is embedded on the GPU and its
embedding goes to the index as a torch tensor: the search runs on the same GPU, ordered on
torch's current stream, and only the k ids come back to the host. Without a GPU (or without
torch) the same embedder runs in numpy and the index on the CPU engine.

launch/python.sh runs the interpreter the module is built for, with build/python on its path
(`launch/setup.sh shardtopk_python` builds the module); or pass --module-dir build/python.
"""

import argparse
import glob
import os
import re
import sys
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_paragraphs():
    """(texts, sources): the paragraphs, list items and table rows of README.md and docs/*.md
    with at least 8 words."""
    texts, sources = [], []
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            body = f.read()
        body = re.sub(r"```.*?```", "", body, flags=re.S)  # code blocks are not prose
        # a list item or a table row starts an entry of its own
        body = re.sub(r"\n(?=\s*(?:[-*] |\d+\. |\|))", "\n\n", body)
        for para in re.split(r"\n\s*\n", body):
            para = " ".join(para.split())
            if len(para.split()) >= 8 and not para.startswith("|---"):
                texts.append(para)
                sources.append(os.path.relpath(path, ROOT))
    return texts, sources


STOP = set("a an and are as at be by for from has have how i if in into is it its of on or that the their "
           "then there these this to was what when where which while who why will with you your".split())


class HashEmbedder:
    """A small bag-of-words model (the hashing trick): words and word pairs hashed into `dim`
    buckets with a sign each, weighted by their inverse document frequency in the corpus (fit),
    scaled to unit length ([n, dim] float32). torch on `device` when given (index_put_ on the GPU),
    else numpy; both give the same vectors up to float32 rounding.
    """

    def __init__(self, dim=4096, device=None):
        self.dim = dim
        self.idf = np.ones(dim, dtype=np.float32)
        self.torch = None
        if device is not None:
            import torch

            self.torch = torch
            self.device = torch.device(device)

    def features(self, text):
        """(buckets, signs) of a text's words (a plural's trailing s dropped) and word pairs."""
        words = [w[:-1] if len(w) > 3 and w.endswith("s") else w
                 for w in re.findall(r"[a-z0-9_]+", text.lower()) if w not in STOP]
        grams = words + [a + " " + b for a, b in zip(words, words[1:])]
        h = np.array([zlib.crc32(g.encode()) for g in grams] or [0], dtype=np.uint64)
        return (h % self.dim).astype(np.int64), np.where((h >> 31) & 1, -1.0, 1.0).astype(np.float32)

    def fit(self, texts):
        df = np.zeros(self.dim)
        for t in texts:
            df[np.unique(self.features(t)[0])] += 1
        self.idf = (np.log((1 + len(texts)) / (1 + df)) + 1).astype(np.float32)
        return self

    def embed(self, texts):
        feats = [self.features(t) for t in texts]
        rows = np.concatenate([np.full(len(b), i) for i, (b, _) in enumerate(feats)])
        cols = np.concatenate([b for b, _ in feats])
        vals = np.concatenate([s for _, s in feats]) * self.idf[cols]
        if self.torch is None:
            x = np.zeros((len(texts), self.dim), dtype=np.float32)
            np.add.at(x, (rows, cols), vals)
            return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
        torch = self.torch
        x = torch.zeros((len(texts), self.dim), dtype=torch.float32, device=self.device)
        index = (torch.from_numpy(rows).to(self.device), torch.from_numpy(cols).to(self.device))
        x.index_put_(index, torch.from_numpy(vals).to(self.device), accumulate=True)
        return torch.nn.functional.normalize(x, dim=1).contiguous()


class SentenceTransformerEmbedder:
    """A sentence-transformers model from the local cache (no download)."""

    def __init__(self, name, device):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(name, device=device, local_files_only=True)

    def embed(self, texts):
        return self.model.encode(texts, convert_to_tensor=True, normalize_embeddings=True).float().contiguous()


def to_host(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.ascontiguousarray(x, dtype=np.float32)


class RetrievalTool:
    """search_docs(query, k): the k paragraphs closest to the query (cosine), best first."""

    spec = {
        "name": "search_docs",
        "description": "Search the shardtopk documentation; returns the most relevant paragraphs.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "k": {"type": "integer", "minimum": 1, "maximum": 20}},
            "required": ["query"],
        },
    }

    def __init__(self, shardtopk, texts, sources, embedder, backend):
        self.texts, self.sources, self.embedder = texts, sources, embedder
        self.vectors = to_host(embedder.embed(texts))  # the corpus is embedded once, then copied in
        self.index = shardtopk.Index.from_arrays(self.vectors, metric="cosine", k_max=64, batch_max=16, backend=backend)

    def __call__(self, query, k=5):
        q = self.embedder.embed([query])  # a torch tensor on the GPU, or a numpy array
        ids, scores = self.index.search(q, k)
        if hasattr(ids, "__dlpack__") and not isinstance(ids, np.ndarray):
            import torch  # device arrays: torch takes them on its current stream, no copy

            ids, scores = torch.from_dlpack(ids)[0].tolist(), torch.from_dlpack(scores)[0].tolist()
        else:
            ids, scores = ids[0].tolist(), scores[0].tolist()
        return [{"score": s, "source": self.sources[i], "text": self.texts[i]} for i, s in zip(ids, scores)]


def pick_device(force_cpu, shardtopk):
    if force_cpu:
        return None, "cpu"
    try:
        import torch
    except ImportError:
        return None, "cpu"
    if torch.cuda.is_available() and shardtopk.cuda_available():
        return "cuda", "cuda"
    return None, "cpu"


def check(tool):
    """The questions' best paragraphs come from the expected documents, and every answer is the
    exact top-k of the embeddings (float64 scores; DESIGN.md's eps)."""
    cases = [  # words that one document owns
        ("torn tail truncated and fsynced", "docs/STORAGE.md"),
        ("FilterProgram postfix instructions", "docs/FILTERS.md"),
        ("arrival counts in an MPI window name a stalled peer", "docs/DESIGN.md"),
    ]
    failures = 0
    for question, want in cases:
        got = tool(question, k=5)
        q = to_host(tool.embedder.embed([question]))[0].astype(np.float64)
        s64 = tool.vectors.astype(np.float64) @ (q / np.linalg.norm(q))
        kth = np.sort(s64)[::-1][4]
        eps = 1e-5 * (max(abs(s64.max()), abs(kth)) + 1)
        for hit in got:
            i = tool.texts.index(hit["text"])
            if s64[i] < kth - eps or abs(s64[i] - hit["score"]) > eps:
                print(f"check: {question!r}: {hit['source']} score {hit['score']} vs float64 {s64[i]} (k-th {kth})")
                failures += 1
        if got[0]["source"] != want:
            print(f"check: {question!r}: best paragraph from {got[0]['source']}, expected {want}")
            failures += 1
    print("check: ok" if failures == 0 else f"check: {failures} failure(s)")
    return failures == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("question", nargs="*", help="what to ask (default: a few examples)")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="numpy and the CPU engine even with a GPU")
    ap.add_argument("--model", help="a sentence-transformers model in the local cache (default: HashEmbedder)")
    ap.add_argument("--module-dir", help="folder holding shardtopk*.so (default: PYTHONPATH)")
    ap.add_argument("--check", action="store_true", help="verify the answers (exit 1 when wrong)")
    a = ap.parse_args()
    if a.module_dir:
        sys.path.insert(0, os.path.abspath(a.module_dir))
    import shardtopk

    device, backend = pick_device(a.cpu, shardtopk)
    texts, sources = load_paragraphs()
    if a.model:
        embedder = SentenceTransformerEmbedder(a.model, device or "cpu")
    else:
        embedder = HashEmbedder(device=device).fit(texts)
    tool = RetrievalTool(shardtopk, texts, sources, embedder, backend)
    info = tool.index.info()
    print(f"{info['rows']} paragraphs, dim {info['dim']}, engine {info['engine']} ({info['device']}), "
          f"embedder {'torch on ' + device if device else 'numpy'}")
    if a.check:
        sys.exit(0 if check(tool) else 1)
    for question in a.question or ["how do I run on two GPUs?", "what happens when a rank dies?"]:
        print(f"\ntool call: search_docs(query={question!r}, k={a.k})")
        for hit in tool(question, k=a.k):
            print(f"  {hit['score']:.3f}  [{hit['source']}]  {hit['text'][:160]}")
    tool.index.close()


if __name__ == "__main__":
    main()
