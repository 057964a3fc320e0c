public import Foundation

/// `swiftc -typecheck` of source files against the modules of the build the calling test runs
/// from: how tests prove that code written for another library compiles against ours (and that a
/// spelling we do not carry fails with our message).
public enum SwiftTypecheck {
    /// What one type-check reported.
    public struct Result: Sendable {
        /// swiftc's exit status (0: no error).
        public let status: Int32
        /// swiftc's output (diagnostics).
        public let output: String

        /// The errors reported in `path`, by line (1-based), in the order swiftc gave them.
        public func errors(in path: String) -> [Int: [String]] {
            var errors: [Int: [String]] = [:]
            for line in output.split(separator: "\n") where line.hasPrefix(path + ":") && line.contains(": error: ") {
                let parts = line.dropFirst(path.count + 1).split(separator: ":", maxSplits: 2)
                guard let number = Int(parts[0]) else { continue }
                errors[number, default: []].append(String(line))
            }
            return errors
        }
    }

    /// Type-checks `files` in the given language mode (`"5"` or `"6"`), on a thread of its own
    /// (see ``BlockingWork``): a swiftc process takes seconds of CPU.
    public static func run(_ files: [String], swiftVersion: String = "6") async throws -> Result {
        try await BlockingWork.run { try runBlocking(files, swiftVersion: swiftVersion) }
    }

    /// ``run(_:swiftVersion:)`` on the calling thread.
    public static func runBlocking(_ files: [String], swiftVersion: String = "6") throws -> Result {
        let build = try buildDirectory()
        var arguments = ["swiftc", "-typecheck", "-swift-version", swiftVersion, "-I", build.appendingPathComponent("Modules").path]
        for map in try moduleMaps(build: build) { arguments += ["-Xcc", "-fmodule-map-file=\(map)"] }
        arguments += files
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }

    /// The directory holding the running test binary's `Modules/` (`.build/<triple>/debug`).
    public static func buildDirectory() throws -> URL {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<4 {
            if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Modules/RealtimeCore.swiftmodule").path) { return directory }
            directory.deleteLastPathComponent()
        }
        throw SetupError("no Modules/RealtimeCore.swiftmodule above \(CommandLine.arguments[0]); run these tests with swift test")
    }

    /// The module maps of the C targets the modules import: generated ones in the build directory
    /// and the packages' own under `.build/checkouts`.
    static func moduleMaps(build: URL) throws -> [String] {
        let manager = FileManager.default
        var maps: [String] = []
        for entry in try manager.contentsOfDirectory(atPath: build.path) where entry.hasSuffix(".build") {
            let map = build.appendingPathComponent(entry).appendingPathComponent("module.modulemap").path
            if manager.fileExists(atPath: map) { maps.append(map) }
        }
        var scratch = build
        while scratch.path != "/", !manager.fileExists(atPath: scratch.appendingPathComponent("checkouts").path) {
            scratch.deleteLastPathComponent()
        }
        let checkouts = scratch.appendingPathComponent("checkouts")
        for package in (try? manager.contentsOfDirectory(atPath: checkouts.path)) ?? [] {
            let sources = checkouts.appendingPathComponent(package).appendingPathComponent("Sources")
            for target in (try? manager.contentsOfDirectory(atPath: sources.path)) ?? [] {
                for candidate in ["include/module.modulemap", "module.modulemap"] {
                    let map = sources.appendingPathComponent(target).appendingPathComponent(candidate).path
                    if manager.fileExists(atPath: map) { maps.append(map) }
                }
            }
        }
        return maps
    }

    /// The build has no modules to check against.
    public struct SetupError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
