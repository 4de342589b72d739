CREATE TABLE student (
    student_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    age INTEGER,
    city TEXT
);
CREATE TABLE course (
    course_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    credits INTEGER NOT NULL
);
CREATE TABLE enrollment (
    student_id INTEGER NOT NULL REFERENCES student (student_id),
    course_id INTEGER NOT NULL REFERENCES course (course_id),
    grade REAL,
    PRIMARY KEY (student_id, course_id)
);
INSERT INTO student VALUES (1, 'Ada', 20, 'London'), (2, 'Ben', 22, 'Paris'),
    (3, 'Chloe', 19, 'London'), (4, 'Dev', 23, NULL);
INSERT INTO course VALUES (10, 'Databases', 6), (11, 'Compilers', 6), (12, 'Statistics', 3);
INSERT INTO enrollment VALUES (1, 10, 3.7), (1, 11, 3.3), (2, 10, 2.7), (3, 12, 4.0),
    (3, 10, NULL), (4, 11, 3.0);
