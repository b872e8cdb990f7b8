"""The library's core besides the exact-Hessian engine (:mod:`transformer_hessian.encoder`) and the closed
forms (:mod:`transformer_hessian.theory`): the paper's post-norm ViT (:mod:`.model`), the language-model
study's GPT (:mod:`.gpt`), dense Hessians of one block's parameter groups (:mod:`.hessian`), the saved
Hessian's check against curvlinops (:mod:`.checks`), matrix-free curvature (:mod:`.krylov`), and the
statistics the studies share (:mod:`.stats`, :mod:`.theorem7`). No config, no files, no study.
"""
