"""`cudadoctor explain`: error text -> known signatures (data in signatures/*.toml) -> cause and fix.

signatures.py loads the data, scan.py finds every signature in any text (streamed, bounded
memory), rank.py orders the matches root cause first, personal.py adds the user's own facts,
render.py prints them. Nothing here imports torch, pynvml or rich.
"""
