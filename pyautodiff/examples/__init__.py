"""Training examples, each runnable as a module and callable as main(argv) ->
dict of final metrics:

    python -m pyautodiff.examples.spirals   # MLP + Adam on 3-class spirals; decision-boundary PNG
    python -m pyautodiff.examples.charlm    # character-level transformer (AdamW, OneCycleLR,
                                            # gradient clipping) on the bundled public-domain text
    python -m pyautodiff.examples.digits    # small CNN on scikit-learn's 8x8 digits
    mpiexec -n 2 python -m pyautodiff.examples.ddp   # data-parallel spirals over MPI

Each takes --help, --steps or --epochs, --seed and --out DIR (PNGs and
checkpoints go to the current directory by default).  tqdm, matplotlib and
scikit-learn are optional: pip install "pyautodiff[examples]" for the
progress bar, the plots and the digits data; "pyautodiff[mpi]" for ddp.
"""
