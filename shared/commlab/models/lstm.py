"""Recurrent models over token ids: LEAF's next-character LSTM and a word-level language model.

char_lstm (LEAF, models/shakespeare/stacked_lstm.py): an 80 x 8 embedding, two LSTM layers of 256,
a dense layer from the last step's output to the 80 characters. 819,920 parameters: PyTorch's LSTM
keeps two bias vectors per layer (input and hidden) where TensorFlow's BasicLSTMCell keeps one, so
2 x 4 x 256 more than LEAF's 817,872; the function computed is the same.

lstm_lm (PowerSGD's WikiText-2 model, epfml/powersgd paper-code/tasks/language_modeling: the
pytorch/examples word_language_model RNNModel with ninp = nhid = 650, 3 layers, dropout 0.4, tied
input and output embeddings): one prediction per input position, output (batch, steps, vocabulary).
With WikiText-2's vocabulary of 33,278 words: 31,819,578 parameters.
"""
from __future__ import annotations

import torch
from torch import nn


class CharLstm(nn.Module):
    def __init__(self, vocab_size: int = 80, embed: int = 8, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.fc = nn.Linear(hidden, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embedding(x))
        return self.fc(out[:, -1])


class LstmLm(nn.Module):
    def __init__(self, vocab_size: int, embed: int = 650, hidden: int = 650, layers: int = 3, dropout: float = 0.4,
                 tied: bool = True) -> None:
        super().__init__()
        if tied and embed != hidden:
            raise ValueError(f"tied embeddings need embed == hidden, got {embed} and {hidden}")
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, dropout=dropout if layers > 1 else 0.0, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab_size)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if tied:  # Press & Wolf 2016: one matrix, counted (and sent) once
            self.decoder.weight = self.encoder.weight
        else:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.drop(self.encoder(x)))
        return self.decoder(self.drop(out))
