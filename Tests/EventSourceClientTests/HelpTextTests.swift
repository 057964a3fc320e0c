import Foundation
import RealtimeTesting
import Testing

/// The `realtime` help texts are paragraphs that ArgumentParser wraps once: rendered at 80 columns,
/// no prose line ends early in mid-sentence (a line under 40 characters that the next line
/// continues), which is what hard line breaks in a discussion do once the text is wrapped again.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct HelpTextTests {
    static let commands: [[String]] = [[], ["ws"], ["sse"], ["socketio"], ["signalr"], ["spreadbot"], ["demo"], ["soak"], ["test-servers"]]

    /// Lines of the overview and discussion (everything before `USAGE:`) that end early while the
    /// sentence goes on: under 40 characters, not ending a sentence or a heading, followed by
    /// unindented prose.
    static func raggedLines(_ help: String) -> [String] {
        let prose = help.components(separatedBy: "\nUSAGE:").first ?? help
        let lines = prose.components(separatedBy: "\n")
        var ragged: [String] = []
        for (line, next) in zip(lines, lines.dropFirst()) {
            guard !line.isEmpty, line.count < 40, !line.hasPrefix(" "), !next.isEmpty, !next.hasPrefix(" ") else { continue }
            guard let last = line.last, !".:!?".contains(last) else { continue }
            ragged.append("\(line)⏎\(next)")
        }
        return ragged
    }

    @Test("every command's help wraps cleanly at 80 columns", arguments: commands)
    func helpWrapsOnce(_ command: [String]) async throws {
        let result = try await RealtimeCommandLine.run(command + ["--help"], environment: ["COLUMNS": "80"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("USAGE:"), "\(result.stdout)")
        // The prose fits the width (ArgumentParser's USAGE line is one line whatever its length).
        let prose = result.stdout.components(separatedBy: "\nUSAGE:").first ?? ""
        #expect(prose.split(separator: "\n").allSatisfy { $0.count <= 80 }, "\(prose)")
        #expect(Self.raggedLines(result.stdout).isEmpty, "\(Self.raggedLines(result.stdout))")
    }

    @Test("the rule finds a hard line break inside a wrapped paragraph")
    func ruleFindsRaggedLines() {
        let ragged = "OVERVIEW: Something.\n\nEvery command writes what it receives, one line at a time\n(flushed as\nit is written), and errors to standard error.\n\nUSAGE: x"
        #expect(Self.raggedLines(ragged) == ["(flushed as⏎it is written), and errors to standard error."])
    }
}
