import Foundation
import RealtimeTesting
import Testing

/// Test helpers must not block the threads that run Swift tasks. On Linux a block queued with
/// `DispatchQueue.global().async` runs on those very threads (libdispatch's default-QoS workers), and
/// blocking there stalled every task of a full test run for up to 4.8 s (see `BlockingWork`). This
/// check keeps that pattern out of the tests and of RealtimeTesting.
@Suite struct BlockingWorkGuardTests {
    @Test("no DispatchQueue.global() blocks in Tests/ or Sources/RealtimeTesting (use BlockingWork.run)")
    func noGlobalQueueBlocks() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        // Built from parts, so this file does not match itself. `asyncAfter` (a short timer block) is allowed.
        let patterns = ["DispatchQueue.global()" + ".async {", "DispatchQueue.global()" + ".sync", "DispatchQueue.global(" + "qos:"]
        var offenders: [String] = []
        var scanned = 0
        for folder in ["Tests", "Sources/RealtimeTesting"] {
            let base = root.appendingPathComponent(folder)
            guard let files = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil) else { continue }
            for case let file as URL in files where file.pathExtension == "swift" {
                scanned += 1
                let text = try String(contentsOf: file, encoding: .utf8)
                for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
                where patterns.contains(where: { line.contains($0) }) {
                    offenders.append("\(file.path.dropFirst(root.path.count + 1)):\(number + 1)")
                }
            }
        }
        #expect(scanned > 50, "the source tree was not found from \(root.path)")
        #expect(offenders.isEmpty, "blocking work on DispatchQueue.global() (use BlockingWork.run): \(offenders)")
    }
}
