CREATE TABLE author (
    author_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    country TEXT
);
CREATE TABLE book (
    book_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    author_id INTEGER REFERENCES author (author_id),
    year INTEGER,
    pages INTEGER
);
INSERT INTO author VALUES (1, 'Mary Shelley', 'UK'), (2, 'Jules Verne', 'France'),
    (3, 'H. G. Wells', 'UK');
INSERT INTO book VALUES (1, 'Frankenstein', 1, 1818, 280), (2, 'The Last Man', 1, 1826, 479),
    (3, 'Twenty Thousand Leagues Under the Seas', 2, 1870, 448),
    (4, 'Around the World in Eighty Days', 2, 1872, 250), (5, 'The Time Machine', 3, 1895, 118);
