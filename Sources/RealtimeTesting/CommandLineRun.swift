public import Foundation
import NIOConcurrencyHelpers

/// Runs an executable of this package (`realtime`, an example) that the same build made, for the
/// command-line tests.
public enum RealtimeCommandLine {
    /// The executable has not been built.
    public struct Missing: Error, CustomStringConvertible {
        /// What is missing and how to build it.
        public let description: String
    }

    /// The folder the running test bundle was built into: the package's executables are there too,
    /// whatever the build (debug, release, a sanitizer, another scratch path).
    public static var binDirectory: URL {
        let running = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = running.deletingLastPathComponent()
        // The test bundle runs from inside `<bin>/<name>.xctest/...` on some platforms.
        while directory.path.contains(".xctest") { directory = directory.deletingLastPathComponent() }
        return directory
    }

    /// The `realtime` command the same build made.
    public static var executable: String { executable(named: "realtime") }

    /// An executable of this package that the same build made.
    public static func executable(named name: String) -> String {
        binDirectory.appendingPathComponent(name).path
    }

    /// Runs `realtime <arguments>` to its end and returns its exit status, standard output and
    /// standard error. The pipes are read on Dispatch threads: blocking the concurrency pool would
    /// starve an in-process server the command talks to.
    /// `environment` is set over the test process's own (the proxy variables, say).
    public static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await run(executable: executable, arguments, environment: environment)
    }

    /// Runs `executable <arguments>` to its end (see ``run(_:environment:)``).
    public static func run(
        executable: String, _ arguments: [String], environment: [String: String] = [:]
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw Missing(description: "\(executable) is missing: `swift build` builds it (Scripts/test.sh does)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Both pipes are read at once (a child that fills one while we wait on the other would
        // stall), each on a thread of its own, never on a thread that runs tasks (see BlockingWork):
        // the command usually talks to a server in this process.
        async let errorOutput = BlockingWork.run { errors.fileHandleForReading.readDataToEndOfFile() }
        let out = await BlockingWork.run { output.fileHandleForReading.readDataToEndOfFile() }
        let err = await errorOutput
        await BlockingWork.run { process.waitUntilExit() }
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }
}

/// A command started by `RealtimeCommandLine/launch(executable:_:)`: its standard output line by
/// line as the command writes it, a signal to send, and its end.
public final class RunningCommand: Sendable {
    private let process: Process
    private let errors: Data.Box
    /// Standard output, one line at a time, as the command writes it (ends when it closes).
    public let lines: AsyncStream<String>
    private let exited: Task<Void, Never>
    private let ended = NIOLockedValueBox<ContinuousClock.Instant?>(nil)
    /// When the command ended: when its standard error closed, as seen by the thread reading it
    /// (not when a task got to run after it: on a busy machine that can be much later).
    public var endTime: ContinuousClock.Instant? { ended.withLockedValue { $0 } }

    private let input: Pipe

    private let signalled = NIOLockedValueBox<ContinuousClock.Instant?>(nil)
    /// When the reading thread sent the signal asked for at launch.
    public var signalTime: ContinuousClock.Instant? { signalled.withLockedValue { $0 } }

    init(process: Process, output: Pipe, errors: Pipe, input: Pipe, signal: (number: Int32, afterLine: Int)? = nil) {
        self.process = process
        self.input = input
        let (lines, continuation) = AsyncStream.makeStream(of: String.self)
        self.lines = lines
        let box = Data.Box()
        self.errors = box
        // Each pipe is read on a thread of its own (see BlockingWork), never on a task's thread.
        let signalled = self.signalled
        Thread.detachNewThread {
            let handle = output.fileHandleForReading
            var pending = Data()
            var pendingSignal = signal
            var lineCount = 0
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    lineCount += 1
                    if let signal = pendingSignal, lineCount >= signal.afterLine {
                        pendingSignal = nil
                        signalled.withLockedValue { $0 = ContinuousClock.now }
                        kill(process.processIdentifier, signal.number)
                    }
                    continuation.yield(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                    pending.removeSubrange(pending.startIndex...newline)
                }
            }
            if !pending.isEmpty { continuation.yield(String(decoding: pending, as: UTF8.self)) }
            continuation.finish()
        }
        let ended = self.ended
        // The process's end, awaited by whoever reads `exited` (the run outlives this initializer).
        // The end is when standard error closes (the command's process exits then; it starts no
        // other), seen by the thread reading it: `waitUntilExit()` learns of the exit from a
        // Dispatch queue, and a second step through a task waits for a thread, either of which
        // took longer than the command on a loaded machine.
        exited = Task {
            let (data, end) = await BlockingWork.run {
                let data = errors.fileHandleForReading.readDataToEndOfFile()
                let closed = ContinuousClock.now
                process.waitUntilExit()
                return (data, closed)
            }
            box.set(data)
            ended.withLockedValue { $0 = end }
        }
    }

    /// Writes one line to the command's standard input.
    public func send(line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    /// Closes the command's standard input (it reads end of file).
    public func closeInput() {
        try? input.fileHandleForWriting.close()
    }

    /// Whether the command has taken `signal` over (caught or ignored it, by `/proc/PID/status`):
    /// sent before, the signal's default action ends the process, as it would any program that
    /// has not started yet.
    public func handles(_ signal: Int32) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8) else { return false }
        let bit = UInt64(1) << UInt64(signal - 1)
        for line in status.split(separator: "\n") where line.hasPrefix("SigIgn:") || line.hasPrefix("SigCgt:") {
            if let mask = UInt64(line.split(separator: "\t").last ?? "", radix: 16), mask & bit != 0 { return true }
        }
        return false
    }

    /// Sends `signal` (SIGINT, SIGTERM) to the command.
    public func signal(_ signal: Int32) {
        kill(process.processIdentifier, signal)
    }

    /// Waits for the command to end; its exit status and standard error.
    public func wait() async -> (status: Int32, stderr: String) {
        await exited.value
        return (process.terminationStatus, String(decoding: errors.value, as: UTF8.self))
    }
}

extension RealtimeCommandLine {
    /// Starts `executable <arguments>` (the `realtime` command by default) and returns at once;
    /// `environment` is added to this process's. With `signal`, the thread reading its standard
    /// output sends `signal.number` as soon as line `signal.afterLine` (from 1) is read (a task would
    /// send it only once it got a thread, which on a loaded machine can be after a short command
    /// ended).
    public static func launch(
        executable: String = executable, _ arguments: [String], environment: [String: String] = [:],
        signal: (number: Int32, afterLine: Int)? = nil
    ) throws -> RunningCommand {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw Missing(description: "\(executable) is missing: `swift build` builds it (Scripts/test.sh does)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = Pipe()
        let errors = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = input
        try process.run()
        return RunningCommand(process: process, output: output, errors: errors, input: input, signal: signal)
    }
}

extension Data {
    /// A value set once by one thread and read by another.
    final class Box: Sendable {
        private let storage = NIOLockedValueBox(Data())
        func set(_ data: Data) { storage.withLockedValue { $0 = data } }
        var value: Data { storage.withLockedValue { $0 } }
    }
}
