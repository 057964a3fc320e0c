import Foundation
import RealtimeTesting
import Testing

// The compat products against the public API of the libraries they stand in for.
//
// Tests/CompatParity/<library>.tsv lists every public item of the original (from its sources at the
// tag on the file's first line), what our compat module does with it (`ours`: same, different: how,
// or not carried: what to use instead) and `check`: the code a user of the original writes for it.
// This suite type-checks every row's check against the compat module, in Swift 5 and Swift 6 language
// modes, and holds the `ours` column to what the compiler says:
// - `same` and `different` rows must compile in both modes (the shape is the original's);
// - `not carried` rows must fail with "is unavailable" (our message says what to use instead);
// and at least 95 % of each library's rows must compile. Tests/CompatParity/Corpus holds whole files
// written the way the originals' users write them (holders of a connection, handlers capturing
// self, main-queue hops, main-actor view models): each must compile in both modes.

/// One library our compat products replace.
struct ParityLibrary: CustomTestStringConvertible, Sendable {
    let name: String
    let module: String
    var testDescription: String { "\(name) → \(module)" }

    static let all = [
        ParityLibrary(name: "socket.io-client-swift", module: "SocketIO"),
        ParityLibrary(name: "SwiftSignalRClient", module: "SignalRClient"),
        ParityLibrary(name: "signalr-client-swift", module: "SignalRClient"),
        ParityLibrary(name: "IKEventSource", module: "IKEventSource"),
    ]
}

/// One row of a parity list.
struct ParityRow: Sendable {
    enum Verdict: Sendable, Equatable { case same, different, notCarried, unknown }

    let line: Int
    let kind: String
    let owner: String
    let name: String
    let ours: String
    let check: String

    var verdict: Verdict {
        if ours == "same" || ours.hasPrefix("same ") || ours.hasPrefix("same:") { return .same }
        if ours.hasPrefix("different:") { return .different }
        if ours.hasPrefix("not carried:") { return .notCarried }
        return .unknown
    }

    var label: String { "line \(line): \(kind) \(owner.isEmpty || owner == "-" ? "" : owner + ".")\(name)" }
}

enum ParityList {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("CompatParity")

    static func rows(of library: ParityLibrary) throws -> [ParityRow] {
        let text = try String(contentsOf: directory.appendingPathComponent("\(library.name).tsv"), encoding: .utf8)
        var rows: [ParityRow] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if line.isEmpty || line.hasPrefix("#") { continue }
            let cells = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            func cell(_ i: Int) -> String { cells.indices.contains(i) ? cells[i].trimmingCharacters(in: .whitespaces) : "" }
            rows.append(ParityRow(line: index + 1, kind: cell(0), owner: cell(1), name: cell(2), ours: cell(5), check: cell(6)))
        }
        return rows
    }

    /// The file that type-checks every row: the imports, the library's prelude, then one function
    /// (or file-scope declaration, for checks starting with `top: `) per row; returns each row's
    /// line range in it.
    static func source(for library: ParityLibrary, rows: [ParityRow]) throws -> (text: String, ranges: [(row: ParityRow, lines: ClosedRange<Int>)]) {
        var lines = ["import Foundation", "import \(library.module)"]
        let preludeURL = directory.appendingPathComponent("\(library.name).prelude.swift")
        if let prelude = try? String(contentsOf: preludeURL, encoding: .utf8) {
            lines += prelude.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                .filter { !$0.hasPrefix("import ") }
        }
        var ranges: [(row: ParityRow, lines: ClosedRange<Int>)] = []
        for row in rows where !row.check.isEmpty {
            let start = lines.count + 1
            if row.check.hasPrefix("top: ") {
                lines.append(String(row.check.dropFirst("top: ".count)))
            } else {
                let effects = row.check.contains("await") ? "async throws" : "throws"
                lines.append("func check_\(row.line)() \(effects) {")
                lines.append(row.check)
                lines.append("}")
            }
            ranges.append((row, start...lines.count))
        }
        return (lines.joined(separator: "\n") + "\n", ranges)
    }

    /// Type-checks every row in Swift 5 and 6; returns the rows whose check compiled in both, the
    /// rows that disagree with their `ours` column, and errors on lines of no row.
    static func evaluate(_ library: ParityLibrary, rows: [ParityRow]) async throws -> (compiled: Set<Int>, failing: [String], stray: [String]) {
        let (text, ranges) = try source(for: library, rows: rows)
        let path = try write(text, named: "\(library.module)Parity.swift")
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        var failing: [String] = []
        var stray: [String] = []
        var modesCompiled: [Int: Int] = [:]
        let covered = ranges.reduce(into: Set<Int>()) { $0.formUnion($1.lines) }
        for mode in ["5", "6"] {
            let result = try await SwiftTypecheck.run([path], swiftVersion: mode)
            let errors = result.errors(in: path)
            stray += errors.filter { !covered.contains($0.key) }.sorted { $0.key < $1.key }.flatMap(\.value).map { "Swift \(mode): \($0)" }
            for (row, lines) in ranges {
                let rowErrors = lines.flatMap { errors[$0] ?? [] }
                let shown = rowErrors.prefix(3).joined(separator: "\n    ")
                switch row.verdict {
                case .same, .different:
                    if rowErrors.isEmpty {
                        modesCompiled[row.line, default: 0] += 1
                    } else {
                        failing.append("Swift \(mode), \(row.label) (\(row.ours.prefix(9))): \(row.check)\n    \(shown)")
                    }
                case .notCarried:
                    if !rowErrors.contains(where: { $0.contains("is unavailable") }) {
                        let outcome = rowErrors.isEmpty ? "compiles" : "fails otherwise"
                        failing.append("Swift \(mode), \(row.label) is `not carried` but its check \(outcome): \(row.check)\n    \(shown)")
                    }
                case .unknown:
                    break
                }
            }
        }
        return (Set(modesCompiled.filter { $0.value == 2 }.keys), failing, stray)
    }

    static func write(_ text: String, named name: String) throws -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("realtime-parity-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let file = folder.appendingPathComponent(name)
        try text.write(to: file, atomically: true, encoding: .utf8)
        return file.path
    }
}

// Each type-check is a swiftc process of several seconds: one at a time (.serialized), on a thread
// of its own (SwiftTypecheck uses BlockingWork), so the tests beside it keep the pool's threads.
@Suite("Compat parity: the originals' public APIs type-check against the compat modules", .serialized)
struct CompatParityTests {
    @Test("every row's check compiles (same, different) or is unavailable (not carried), in Swift 5 and 6; 95 % or more compile",
          arguments: ParityLibrary.all)
    func parity(_ library: ParityLibrary) async throws {
        let rows = try ParityList.rows(of: library)
        #expect(!rows.isEmpty)
        let unchecked = rows.filter { $0.check.isEmpty }.map(\.label)
        #expect(unchecked.isEmpty, "\(library.name): rows without a check: \(unchecked)")
        let unknown = rows.filter { $0.verdict == .unknown }.map { "\($0.label): \($0.ours)" }
        #expect(unknown.isEmpty, "\(library.name): `ours` must be same, different: how, or not carried: instead: \(unknown)")

        let (compiled, failing, stray) = try await ParityList.evaluate(library, rows: rows)
        #expect(stray.isEmpty, "\(library.name): errors outside every row (the prelude?):\n\(stray.joined(separator: "\n"))")
        let notCarried = rows.filter { $0.verdict == .notCarried }.count
        let share = Double(compiled.count) / Double(rows.count)
        print("parity \(library.name) → \(library.module): \(compiled.count) of \(rows.count) (\(String(format: "%.1f", share * 100)) %) compile with the original's shape in Swift 5 and 6; \(notCarried) not carried (unavailable, saying what to use); \(failing.count) failing checks")
        let disagreements = failing.joined(separator: "\n")
        #expect(failing.isEmpty, "\(library.name): \(failing.count) rows disagree with the compiler:\n\(disagreements)")
        #expect(share >= 0.95, "\(library.name): \(compiled.count) of \(rows.count) compile; at least 95 % must")
    }

    /// The check can fail: rows that lie about the compiler are reported, a true row is counted.
    @Test("a row whose check does not compile, or a not-carried row that compiles, is reported")
    func theCheckCanFail() async throws {
        let library = ParityLibrary(name: "self-test", module: "SocketIO")
        let rows = [
            ParityRow(line: 1, kind: "usage", owner: "", name: "compiles", ours: "same", check: "let url = URL(string: \"http://localhost\")!; _ = url"),
            ParityRow(line: 2, kind: "usage", owner: "", name: "wrong type", ours: "same", check: "let number: Int = \"text\"; _ = number"),
            ParityRow(line: 3, kind: "usage", owner: "", name: "missing", ours: "different: named otherwise", check: "_ = NoSuchTypeAnywhere()"),
            ParityRow(line: 4, kind: "usage", owner: "", name: "claims unavailable", ours: "not carried: use something", check: "_ = 1 + 1"),
            ParityRow(line: 5, kind: "usage", owner: "", name: "at file scope", ours: "same", check: "top: final class CheckedAtFileScope {}"),
        ]
        let (compiled, failing, stray) = try await ParityList.evaluate(library, rows: rows)
        #expect(compiled == [1, 5])
        #expect(stray.isEmpty, "\(stray)")
        // Lines 2, 3 and 4, once per language mode.
        #expect(failing.count == 6, "\(failing)")
        #expect(failing.filter { $0.contains("line 4:") && $0.contains("is `not carried` but its check compiles") }.count == 2)
    }

    /// What the compat modules add to the originals (TLS settings) is reachable with the compat
    /// import alone, in both modes.
    @Test("the compat modules' own additions compile with only the original's import")
    func additionsNeedOnlyTheCompatImport() async throws {
        let samples = [
            ("SocketIO", """
            func configure(url: URL) -> SocketManager {
                SocketManager(socketURL: url, config: [.secure(true), .tls(TLSOptions(trustRoots: .pemFile("/etc/ssl/ca.pem"), pinnedPublicKeySHA256: ["k"]))])
            }
            """),
            ("SignalRClient", """
            func configure(url: URL) -> HubConnection {
                HubConnectionBuilder(url: url).withHttpConnectionOptions { options in
                    options.tls = TLSOptions(trustRoots: .pem("-----BEGIN CERTIFICATE-----"), pinnedPublicKeySHA256: ["k"])
                }.build()
            }
            """),
        ]
        for (module, body) in samples {
            let path = try ParityList.write("import Foundation\nimport \(module)\n\(body)\n", named: "\(module)Additions.swift")
            defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
            for mode in ["5", "6"] {
                let result = try await SwiftTypecheck.run([path], swiftVersion: mode)
                #expect(result.status == 0, "\(module), Swift \(mode):\n\(result.output)")
            }
        }
    }

    static var corpusFiles: [String] {
        let root = ParityList.directory.appendingPathComponent("Corpus")
        let enumerator = FileManager.default.enumerator(atPath: root.path)
        var files: [String] = []
        while let path = enumerator?.nextObject() as? String {
            if path.hasSuffix(".swift") { files.append(path) }
        }
        return files.sorted()
    }

    @Test("code written the way the originals' users write it compiles in Swift 5 and 6", arguments: corpusFiles)
    func corpus(_ file: String) async throws {
        let path = ParityList.directory.appendingPathComponent("Corpus").appendingPathComponent(file).path
        for mode in ["5", "6"] {
            let result = try await SwiftTypecheck.run([path], swiftVersion: mode)
            #expect(result.status == 0, "Corpus/\(file) in Swift \(mode):\n\(result.output)")
        }
    }

    @Test("there is a corpus for each compat module")
    func corpusCoversEachModule() {
        let modules = Set(Self.corpusFiles.compactMap { $0.split(separator: "/").first.map(String.init) })
        #expect(modules == Set(ParityLibrary.all.map(\.module)), "corpus folders: \(modules.sorted())")
    }
}
